"""encode_head (benchmark/token_head.py): the first `limit` tokens of a text from a prefix of it, equal to the whole
text's encoding at every cut position, while encoding no more than a bounded prefix. With a byte-level BPE trained
here (tests/support/bpe_target.py), where a cut inside a word changes its merges: the negative control shows it does."""

from __future__ import annotations

import random

import pytest
from support.bpe_target import WORDS, EncodeSpy, sample_text, train_bpe
from tokenizers import Tokenizer, models, pre_tokenizers

from eagle_convert.benchmark import token_head
from eagle_convert.benchmark.token_head import AGREE, MARGIN, HeadEncoder, encode_head, encode_windows, tokens_before


@pytest.fixture(scope="module")
def bpe():
    return train_bpe()


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids



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
    spy, limit = EncodeSpy(bpe), 2048
    head = encode_head(spy, text, limit)
    assert head.ids == _ids(bpe, text)[:limit] and head.truncated
    bound = token_head.FIRST_CUT_CHARS_PER_TOKEN * (limit + MARGIN) * 9 // 4  # two growth steps of 1.5
    assert max(spy.lengths) <= bound < len(text) // 10 and len(spy.lengths) <= 3


def test_head_encoder_reuses_a_shared_start_and_only_then(bpe):
    rng = random.Random(5)
    turns = [sample_text(rng, 120) for _ in range(12)]
    texts = [" ".join(turns[:j]) for j in range(1, 13)]
    texts.insert(6, "Changed " + texts[5])  # a render whose start differs: the head must be encoded again
    spy, limit = EncodeSpy(bpe), 100
    encoder = HeadEncoder(spy, limit)
    for text in texts:
        whole = _ids(bpe, text)
        head = encoder(text)
        assert (head.ids, head.truncated) == (whole[:limit], len(whole) > limit)
    fresh = EncodeSpy(bpe)
    for text in texts:
        encode_head(fresh, text, limit)
    assert len(spy.lengths) < len(fresh.lengths) // 2  # reused for the texts that start alike


def _windowed(tokenizer, text: str, window: int) -> list[int]:
    return [i for ids, _ in encode_windows(tokenizer, text, window) for i in ids]


def test_windows_equal_the_whole_encoding_at_every_cut_offset(bpe):
    base = sample_text(random.Random(6), 1500) + " " + "unbelievable" * 200 + " " + sample_text(random.Random(7), 200)
    for shift in range(token_head.FIRST_CUT_CHARS_PER_TOKEN):  # windows move 4 characters per token of their size:
        text = "x" * shift + base  # shifting the text by 0-3 characters puts a cut at every offset
        whole = _ids(bpe, text)
        for window in range(AGREE + 1, 3 * AGREE, 7):
            assert _windowed(bpe, text, window) == whole, (shift, window)


def test_windows_splice_only_where_two_cuts_agree(bpe):
    text = sample_text(random.Random(8), 4000)
    span = token_head.FIRST_CUT_CHARS_PER_TOKEN * 200
    naive = [i for start in range(0, len(text), span) for i in _ids(bpe, text[start:start + span])]
    assert naive != _ids(bpe, text)  # negative control: windows simply laid end to end change the tokens at the cuts
    settled = [end for _, end in encode_windows(bpe, text, 200)]
    assert settled == sorted(settled) and settled[-1] == len(text) and len(settled) > 10


def test_a_long_render_is_never_encoded_whole_by_windows(bpe):
    text = sample_text(random.Random(9), 60_000)  # ~350k characters
    spy, window = EncodeSpy(bpe), 2048
    assert _windowed(spy, text, window) == _ids(bpe, text)
    span = token_head.FIRST_CUT_CHARS_PER_TOKEN * window
    assert max(spy.lengths) <= 2 * span < len(text) // 10  # a window and its overlap
    assert sum(spy.lengths) < 1.2 * len(text)  # each character encoded about once


def _word_level() -> Tokenizer:
    words = sorted(set(WORDS))
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def test_windows_grow_past_a_word_longer_than_the_overlap():
    tokenizer, rng = _word_level(), random.Random(10)
    before, after = " ".join(rng.choice(WORDS) for _ in range(900)), " ".join(rng.choice(WORDS) for _ in range(900))
    for run in (3000, 9000):  # one unknown "word" longer than a window: no two cuts give it the same characters
        text = f"{before} {'x' * run} {after}"
        spy = EncodeSpy(tokenizer)
        assert _windowed(spy, text, 100) == _ids(tokenizer, text), run
        assert max(spy.lengths) > run > 2 * token_head.FIRST_CUT_CHARS_PER_TOKEN * 100  # the window grew over it
    ending = f"{before} {'x' * 3000}"  # the run reaches the end, past the last agreed tokens
    assert _windowed(tokenizer, ending, 100) == _ids(tokenizer, ending)
    assert _windowed(tokenizer, "tail " * 3 + "x" * 3000, 100) == _ids(tokenizer, "tail " * 3 + "x" * 3000)
