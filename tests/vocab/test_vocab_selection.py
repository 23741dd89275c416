"""Our selection is tensor-equal to the producers' own code (SpecForge 0.2.0 `process_token_dict_to_mappings`,
speculators 0.9.0 `build_vocab_mappings_from_distribution`, run here from the installed wheels), on corpora with ties
at the cut-off and with fewer distinct tokens than N, for a padded config vocab and a VLM's text_config vocab."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from support.producers import producer_function

from eagle_convert.vocab.counts import TokenCounts
from eagle_convert.vocab.rules import VocabMapError
from eagle_convert.vocab.selection import select


def _counts(samples: list[list[int]], ascending: bool = True) -> TokenCounts:
    counts = TokenCounts()
    for sample in samples:
        counts.add_sample(sample, ascending_per_sample=ascending)
    return counts


def _specforge(counts: TokenCounts, n: int, vocab: int):
    # the counter as generate_vocab_mapping_file fills it: per sample, unique ids (ascending) with counts
    return producer_function("process_token_dict_to_mappings")(Counter(counts.counts), n, vocab)


def _speculators(counts: TokenCounts, n: int, vocab: int):
    return producer_function("build_vocab_mappings_from_distribution")(dict(counts.counts), n, vocab)


def _equal(ours, theirs) -> None:
    d2t, t2d = theirs
    assert ours.d2t().dtype == d2t.dtype == torch.int64 and ours.t2d().dtype == t2d.dtype == torch.bool
    assert torch.equal(ours.d2t(), d2t) and torch.equal(ours.t2d(), t2d)


# The research's demonstration: counts {7:2, 50:1, 3:1, 9:1}, N=2 -> SpecForge keeps {7, 50}, speculators {3, 7}.
TIE_DEMO = [[7, 50], [7, 3], [9]]

# Fewer distinct ids than N: 0..989 without 5 and 17, plus 100000 (989 distinct), N = 1000 (set-order padding).
FEW = [[i for i in range(990) if i not in (5, 17)] + [100_000]]


def _random_corpus(seed: int, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)  # small alphabet, many samples: many ties at every cut-off
    return [[rng.randrange(vocab // 3) for _ in range(rng.randrange(1, 12))] for _ in range(300)]


@pytest.mark.parametrize("compat, producer", [("specforge", _specforge), ("speculators", _speculators)])
@pytest.mark.parametrize("corpus, n, vocab", [
    (TIE_DEMO, 2, 64), (TIE_DEMO, 3, 64), (TIE_DEMO, 10, 64),
    (FEW, 1000, 151_936),  # a padded config vocab (Qwen's 151936 rows, tokenizer smaller)
    (_random_corpus(0, 600), 40, 640), (_random_corpus(1, 600), 150, 640), (_random_corpus(2, 96), 50, 96),
])
def test_selection_equals_the_producers(compat, producer, corpus, n, vocab):
    counts = _counts(corpus)
    _equal(select(counts, n, vocab, compat), producer(counts, n, vocab))


def test_ties_at_the_cut_off_differ_between_producers():
    counts = _counts(TIE_DEMO)
    assert select(counts, 2, 64, "specforge").target_ids == (7, 50)
    assert select(counts, 2, 64, "speculators").target_ids == (3, 7)
    # negative control: the producers' code agrees with that, so the comparison above can fail
    assert not torch.equal(_specforge(counts, 2, 64)[0], _speculators(counts, 2, 64)[0])


def test_padding_with_fewer_distinct_tokens_than_n():
    counts = _counts(FEW)
    padded_sf = set(select(counts, 1000, 151_936, "specforge").target_ids) - set(range(990)) - {100_000}
    padded_sp = set(select(counts, 1000, 151_936, "speculators").target_ids) - set(range(990)) - {100_000}
    assert padded_sf == {990, *range(992, 1000)} and padded_sp == set(range(990, 999))
    assert select(counts, 1000, 151_936, "eagle").draft_vocab_size == 989  # the EAGLE reference does not pad


def test_vlm_text_config_vocab_sizes_t2d():
    # A VLM's t2d is sized by text_config.vocab_size; the selection takes that size, as both producers do.
    counts = _counts(_random_corpus(3, 300))
    _equal(select(counts, 64, 151_674, "specforge"), _specforge(counts, 64, 151_674))
    assert select(counts, 64, 151_674, "speculators").t2d().numel() == 151_674


def test_modelopt_keeps_frequency_order_and_refuses_to_pad():
    counts = _counts([[5, 5, 5, 2, 2, 9]], ascending=False)
    assert select(counts, 3, 16, "modelopt").target_ids == (5, 2, 9)
    with pytest.raises(VocabMapError, match="fewer than -n 4"):
        select(counts, 4, 16, "modelopt")


def test_nemo_forces_specials_first():
    counts = _counts([[5, 5, 5, 2, 2, 9]])
    assert select(counts, 4, 16, "nemo", special_ids=(0, 1)).target_ids == (0, 1, 5, 2)
    assert select(counts, 6, 16, "nemo", special_ids=(1,)).target_ids == (1, 5, 2, 9, 0, 3)


def test_sizes_are_refused_by_name():
    with pytest.raises(VocabMapError, match="exceeds the target vocabulary"):
        select(_counts(TIE_DEMO), 65, 64, "specforge")
    with pytest.raises(VocabMapError, match="Unknown --compat"):
        select(_counts(TIE_DEMO), 2, 64, "llama")
