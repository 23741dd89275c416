"""encode_head (benchmark/token_head.py): the first `limit` tokens of a text from a prefix of it, equal to the whole
text's encoding at every cut position, while encoding no more than a bounded prefix. With a byte-level BPE trained
here (tests/support/bpe_target.py), where a cut inside a word changes its merges: the negative control shows it does."""

from __future__ import annotations

import random

import pytest
from support.bpe_target import sample_text, train_bpe

from eagle_convert.benchmark import token_head
from eagle_convert.benchmark.token_head import MARGIN, HeadEncoder, encode_head, tokens_before


@pytest.fixture(scope="module")
def bpe():
    return train_bpe()


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


class _Spy:
    """A tokenizer that records how many characters each encode call was given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def encode(self, text, add_special_tokens):
        self.lengths.append(len(text))
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)


def test_a_cut_changes_only_the_tokens_next_to_it(bpe):
    text = sample_text(random.Random(1), 500) + " " + "unbelievable" * 40  # a 480-character word at the end
    whole = _ids(bpe, text)
    changed_at_cut = 0
    for cut in range(len(text)):
        part = _ids(bpe, text[:cut])
        kept = max(len(part) - MARGIN, 0)
        assert part[:kept] == whole[:kept], cut
        changed_at_cut += part != whole[:len(part)]
    assert changed_at_cut > len(text) // 2  # negative control: the tokens at a cut do differ, the margin is needed


def test_head_equals_the_whole_encoding_at_every_cut_offset(bpe):
    base = sample_text(random.Random(2), 700)
    for shift in range(token_head.FIRST_CUT_CHARS_PER_TOKEN):  # cuts move 4 characters per limit: shifting the
        text = "x" * shift + base  # text by 0-3 characters puts a cut at every offset
        whole = _ids(bpe, text)
        for limit in [*range(1, 320), len(whole) - 1, len(whole), len(whole) + 1]:
            head = encode_head(bpe, text, limit)
            assert (head.ids, head.truncated) == (whole[:limit], len(whole) > limit), (shift, limit)


def test_span_bounds_equal_the_prefix_lengths(bpe):
    text = sample_text(random.Random(3), 900)
    for limit in (5, 64, 300):
        head = encode_head(bpe, text, limit)
        assert head.settled_at < len(text)  # the bounded path, not the whole text
        for chars in range(0, len(text) + 1, 7):
            assert tokens_before(bpe, text, head, chars, limit) == min(len(_ids(bpe, text[:chars])), limit), chars


def test_a_long_text_is_never_encoded_whole(bpe):
    text = sample_text(random.Random(4), 60_000)  # ~350k characters
    spy, limit = _Spy(bpe), 2048
    head = encode_head(spy, text, limit)
    assert head.ids == _ids(bpe, text)[:limit] and head.truncated
    bound = token_head.FIRST_CUT_CHARS_PER_TOKEN * (limit + MARGIN) * 9 // 4  # two growth steps of 1.5
    assert max(spy.lengths) <= bound < len(text) // 10 and len(spy.lengths) <= 3


def test_head_encoder_reuses_a_shared_start_and_only_then(bpe):
    rng = random.Random(5)
    turns = [sample_text(rng, 120) for _ in range(12)]
    texts = [" ".join(turns[:j]) for j in range(1, 13)]
    texts.insert(6, "Changed " + texts[5])  # a render whose start differs: the head must be encoded again
    spy, limit = _Spy(bpe), 100
    encoder = HeadEncoder(spy, limit)
    for text in texts:
        whole = _ids(bpe, text)
        head = encoder(text)
        assert (head.ids, head.truncated) == (whole[:limit], len(whole) > limit)
    fresh = _Spy(bpe)
    for text in texts:
        encode_head(fresh, text, limit)
    assert len(spy.lengths) < len(fresh.lengths) // 2  # reused for the texts that start alike
