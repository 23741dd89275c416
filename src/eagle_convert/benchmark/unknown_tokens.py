"""Texts the target's tokenizer cannot read. A word-level or WordPiece tokenizer turns words it lacks into its unknown
token; a prompt, document or corpus that is mostly that token (text in another language or script than the target's,
or a tokenizer.json that is not the target's) still runs, and every number measured on it is meaningless, so say so.
Byte-level tokenizers (most LLMs') have no unknown token and nothing to check."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence

from tokenizers import Tokenizer

from ..errors import InputWarning

MOSTLY = 0.5  # more than this share of a text's tokens unknown: the text is not read, whatever the rest says
SHOWN = 3  # names listed in the warning


class UnknownTokensWarning(InputWarning):
    """Most of a text the user handed in maps to the tokenizer's unknown token."""


def unknown_token_id(tokenizer: Tokenizer) -> int | None:
    """The model's unknown-token id (WordLevel, WordPiece, Unigram and BPE models may name one), else None."""
    name = getattr(tokenizer.model, "unk_token", None)
    return tokenizer.token_to_id(name) if isinstance(name, str) else None


def unknown_share(ids: Sequence[int], unknown: int) -> float:
    return sum(1 for i in ids if i == unknown) / len(ids) if ids else 0.0


def warn_mostly_unknown(tokenizer: Tokenizer, texts: Iterable[tuple[str, Sequence[int]]], what: str) -> list[str]:
    """Warn (UnknownTokensWarning) when any of `texts` ((name, ids) pairs: the text alone, no template) is mostly
    the unknown token; returns the names of those that are."""
    unknown = unknown_token_id(tokenizer)
    if unknown is None:
        return []
    texts = list(texts)
    bad = [name for name, ids in texts if unknown_share(ids, unknown) > MOSTLY]
    if bad:
        shown = ", ".join(repr(name) for name in bad[:SHOWN]) + (", ..." if len(bad) > SHOWN else "")
        _warn(f"{len(bad)} of {len(texts)} {what} are mostly the tokenizer's unknown token "
              f"{tokenizer.id_to_token(unknown)!r} ({shown}).")
    return bad


def warn_unknown_counts(tokenizer: Tokenizer, counts: Mapping[int, int], what: str) -> float:
    """The same check over token counts (a counted corpus): warn when most counted tokens are unknown; the share."""
    unknown, total = unknown_token_id(tokenizer), sum(counts.values())
    share = counts.get(unknown, 0) / total if unknown is not None and total else 0.0
    if share > MOSTLY:
        _warn(f"{share:.0%} of the tokens counted in {what} are the tokenizer's unknown token "
              f"{tokenizer.id_to_token(unknown)!r}.")
    return share


def _warn(finding: str) -> None:
    warnings.warn(UnknownTokensWarning(
        f"{finding} The target's tokenizer does not read these texts, so what is measured on them says nothing about "
        "real use. Give texts in the language the target was trained on, or check that the target folder's "
        "tokenizer.json is the target's own."), stacklevel=3)
