"""The first `limit` tokens of a text without encoding all of it: what a producer keeps of a sample it truncates
to --max-length, at a cost bounded by the limit instead of by the text (a 10 MB line once took 20+ GB).

Why a prefix gives the same tokens: a tokenizer splits the text into pre-tokens (words, special tokens) and encodes
each on its own, so cutting the text can only change the tokens of the words at the cut. `encode_head` encodes
growing prefixes until one holds `limit + MARGIN` tokens, so the cut lies MARGIN tokens past what is kept, then
confirms with a second, longer cut: the kept tokens must come out the same from both, else it keeps growing (up to
the whole text, which is exact by definition). tests/test_token_head.py checks the result against the whole
text's encoding at every cut position of long texts, for a byte-level BPE and a word-level tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer

MARGIN = 64  # tokens encoded past the limit and dropped: a cut inside a word changes at most that word's tokens
FIRST_CUT_CHARS_PER_TOKEN = 4  # the first prefix's length per wanted token (English BPE: ~4 chars a token)


@dataclass(frozen=True)
class Head:
    ids: list[int]  # the whole text's encoding, first `limit` tokens
    truncated: bool  # the whole text encodes to more than `limit` tokens
    settled_at: int  # every prefix text[:c] with c >= settled_at encodes to at least `limit` tokens
    read: int  # characters encoded to decide: a text that starts with the same `read` characters and is longer
    #            than `read` takes the same steps, so it has the same head (speculators' renders of one growing
    #            conversation, turn after turn, share their start)


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def encode_head(tokenizer: Tokenizer, text: str, limit: int) -> Head:
    """encode(text)[:limit] (no special tokens added) and whether more followed, holding O(limit) tokens."""
    wanted = limit + MARGIN
    cut, seen = FIRST_CUT_CHARS_PER_TOKEN * wanted, None  # seen: (cut, its first `limit` tokens) awaiting confirmation
    while cut < len(text):
        ids = _encode(tokenizer, text[:cut])
        if len(ids) >= wanted:
            if seen is not None and seen[1] == ids[:limit]:
                return Head(seen[1], True, seen[0], cut)
            seen = (cut, ids[:limit])
        cut += cut // 2
    ids = _encode(tokenizer, text)
    return Head(ids[:limit], len(ids) > limit, len(text) + 1, len(text))


class HeadEncoder:
    """encode_head for texts that often start alike: reuses the last head when the new text shares what it read."""

    def __init__(self, tokenizer: Tokenizer, limit: int):
        self.tokenizer, self.limit = tokenizer, limit
        self.last: tuple[str, Head] | None = None

    def __call__(self, text: str) -> Head:
        if self.last is not None:
            previous, head = self.last
            # only a head decided before the end of its text: one that read all of it says nothing about a longer one
            if head.read < len(previous) and head.read < len(text) and text.startswith(previous[:head.read]):
                return head
        head = encode_head(self.tokenizer, text, self.limit)
        self.last = (text, head)
        return head


def tokens_before(tokenizer: Tokenizer, text: str, head: Head, chars: int, limit: int) -> int:
    """min(len(encode(text[:chars])), limit): SpecForge's token index of a character offset, bounded."""
    if chars >= head.settled_at:
        return limit
    return len(encode_head(tokenizer, text[:chars], limit).ids)
