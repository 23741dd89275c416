"""The first `limit` tokens of a text without encoding all of it: what a producer keeps of a sample it truncates
to --max-length, at a cost bounded by the limit instead of by the text (a 10 MB line once took 20+ GB).

Why a prefix gives the same tokens: a tokenizer splits the text into pre-tokens (words, special tokens) and encodes
each on its own, so cutting the text can only change the tokens of the words at the cut. `encode_head` encodes
growing prefixes until one holds `limit + MARGIN` tokens, so the cut lies MARGIN tokens past what is kept, then
confirms with a second, longer cut: the kept tokens must come out the same from both, else it keeps growing (up to
the whole text, which is exact by definition). tests/benchmark/test_token_head.py checks the result against the whole
text's encoding at every cut position of long texts, for a byte-level BPE and a word-level tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
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


# Windows: the whole text's tokens, a bounded piece at a time (ModelOpt counts every token of one render of the
# corpus). Each window is encoded on its own; the next one starts OVERLAP tokens before the current one ends, and
# the two are spliced inside a run of AGREE tokens that both give alike (same id, same characters): tokens that two
# different cuts agree on are far enough from both. No such run (a pre-token longer than the overlap, say): the
# overlap doubles (and the next window's reach), up to the rest of the text; past that the whole text is encoded,
# which is exact by definition.
WINDOW_TOKENS = 8192  # tokens a window is sized for (at FIRST_CUT_CHARS_PER_TOKEN characters a token)
OVERLAP = 2 * MARGIN
AGREE = MARGIN

Token = tuple[int, int, int]  # id, first character, end character (in the whole text)


def _tokens(tokenizer: Tokenizer, text: str, start: int, end: int) -> list[Token]:
    encoding = tokenizer.encode(text[start:end], add_special_tokens=False)
    return [(i, start + a, start + b) for i, (a, b) in zip(encoding.ids, encoding.offsets)]


def _splice(current: list[Token], first: int, following: list[Token]) -> tuple[int, int] | None:
    """(i, j): current[i:] and following[j:] are the same tokens, in the middle of a run of AGREE that agree."""
    where: dict[Token, int] = {}
    for i in range(first, len(current)):
        where.setdefault(current[i], i)
    for j, token in enumerate(following):
        i = where.get(token)
        if i is not None and len(current) - i >= AGREE and current[i:i + AGREE] == following[j:j + AGREE]:
            return i + AGREE // 2, j + AGREE // 2
    return None


def encode_windows(tokenizer: Tokenizer, text: str, window: int | None = None) -> Iterator[tuple[list[int], int]]:
    """encode(text).ids (no special tokens added) in consecutive pieces, each with the characters settled so far;
    no encode call is given more than a window and its overlap, unless one pre-token is longer than that."""
    span = FIRST_CUT_CHARS_PER_TOKEN * (window or WINDOW_TOKENS)
    origin, end = 0, min(len(text), span)  # current: the tokens of text[origin:end]
    current, first = _tokens(tokenizer, text, 0, end), 0  # current[first:]: agreed on, not given out yet
    while end < len(text):
        found = _next_window(tokenizer, text, current, first, end, span)
        if found is None:  # no agreed tokens left before the run no cut agrees on: this window grows over it
            origin, end, current, first = _grown(tokenizer, text, current, first, origin, end, span)
            continue
        (i, j), following, cut, following_end = found
        yield [token[0] for token in current[first:i]], following[j][1] if j < len(following) else len(text)
        origin, end, current, first = cut, following_end, following, j
    yield [token[0] for token in current[first:]], len(text)


def _next_window(tokenizer: Tokenizer, text: str, current: list[Token], first: int, end: int, span: int):
    """((i, j), following, its first character, its end): the next window, spliced to current at (i, j); None
    when even an overlap back to current[first] finds no agreeing run."""
    overlap, ahead = OVERLAP, span
    while True:
        back = max(first, len(current) - overlap)
        cut = current[back][1] if back < len(current) else end
        following_end = min(len(text), end + max(ahead, end - cut))  # as far past the end as it starts before
        following = _tokens(tokenizer, text, cut, following_end)
        splice = _splice(current, first, following)
        if splice is not None:
            return splice, following, cut, following_end
        if back == first:
            return None
        overlap, ahead = 2 * overlap, 2 * ahead


def _grown(tokenizer: Tokenizer, text: str, current: list[Token], first: int, origin: int, end: int, span: int):
    """The current window encoded again from its own start to twice as far, the agreed token found in it again;
    the whole text when it is not (then exact by definition)."""
    end = min(len(text), end + max(span, end - origin))
    grown = _tokens(tokenizer, text, origin, end)
    if first == len(current):  # nothing agreed on yet: an empty first window, from the text's start
        return origin, end, grown, 0
    if current[first] in grown:
        return origin, end, grown, grown.index(current[first])
    whole = _tokens(tokenizer, text, 0, len(text))
    return 0, len(text), whole, next((k for k, token in enumerate(whole) if token[1] >= current[first][1]), len(whole))
