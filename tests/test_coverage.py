"""`vocab-map coverage`'s counting (benchmark/coverage.py): the share of the target's tokens a draft vocabulary
cannot propose, on a case small enough to count by hand."""

from __future__ import annotations

import pytest
import torch

from eagle_convert.benchmark.coverage import coverage


def test_coverage_counts_every_occurrence_on_a_hand_counted_stream():
    # stream: 7 x3, 50 x2, 3, 9, 11 (8 tokens, 5 distinct); vocabulary {3, 7, 42}
    stream = [7, 50, 7, 3, 9, 50, 7, 11]
    c = coverage(stream, [42, 7, 3], label="N=3")
    # outside: 50, 50, 9, 11 -> 4 of 8 occurrences; distinct outside: 50, 9, 11 -> 3 of 5
    assert (c.stream_tokens, c.outside_tokens, c.stream_distinct, c.outside_distinct) == (8, 4, 5, 3)
    assert c.outside_share == 0.5 and c.ceiling == 0.5 and c.draft_vocab_size == 3
    assert c.to_dict() == {"label": "N=3", "draft_vocab_size": 3, "stream_tokens": 8, "outside_tokens": 4,
                           "outside_share": 0.5, "acceptance_ceiling": 0.5, "stream_distinct": 5,
                           "outside_distinct": 3}


def test_coverage_of_a_larger_vocabulary_and_edge_cases():
    stream = torch.tensor([[7, 50, 7, 3], [9, 50, 7, 11]])  # any shape: every element is one token
    assert coverage(stream, [3, 7, 9, 50, 11]).outside_tokens == 0  # the whole stream: ceiling 1
    c = coverage(stream, torch.tensor([50, 7, 7]))  # a duplicate counts once
    assert (c.draft_vocab_size, c.outside_tokens) == (2, 3)  # 3, 9, 11 outside
    assert c.ceiling == pytest.approx(5 / 8)
    empty = coverage([], [1, 2])
    assert empty.outside_share is None and empty.ceiling is None and empty.stream_tokens == 0
