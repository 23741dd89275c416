"""Each producer's selection rule, as data: which tokens it counts (mask), how it treats long samples, how it breaks
ties at the cut-off, how it pads a corpus with fewer distinct tokens than N, and in which order it lays out the draft
ids. `select` turns `TokenCounts` into a `VocabMap` the way that producer's own code does (the tests hold it
tensor-equal to SpecForge 0.2.0's `process_token_dict_to_mappings` and speculators 0.9.0's
`build_vocab_mappings_from_distribution`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .counts import TokenCounts
from .map import VocabMap
from .rules import VocabMapError, rule_for


def _first_seen_top(counts: dict[int, int], n: int) -> list[int]:
    # Counter.most_common(n) is heapq.nlargest on counts: stable, so equal counts keep insertion order.
    return [i for i, _ in Counter(counts).most_common(n)]


def _lowest_id_top(counts: dict[int, int], n: int) -> list[int]:
    return sorted(counts, key=lambda i: (-counts[i], i))[:n]


def _specforge_padded(counts: dict[int, int], n: int) -> dict[int, int]:
    """SpecForge's padding, literally: zero-count ids from `set(range(n)) - existing`, in CPython's set iteration
    order (not ascending), until n ids are known. Which ids join depends on that order, so it is not "improved"."""
    padded = Counter(counts)
    if len(padded) < n:
        for token in set(range(n)) - set(padded.keys()):
            padded[token] = 0
            if len(padded) >= n:
                break
    return padded


def _lowest_unused(chosen: list[int], n: int) -> list[int]:
    have = set(chosen)
    return chosen + [i for i in range(n) if i not in have][: n - len(chosen)]


def _check_sizes(n: int, vocab_size: int) -> None:
    if n < 1:
        raise VocabMapError(f"-n {n}: a draft vocabulary needs at least one token.", "Pass a positive -n.")
    if n > vocab_size:
        raise VocabMapError(f"-n {n} exceeds the target vocabulary ({vocab_size}).",
                            f"Pass -n of at most {vocab_size}.")


def select(counts: TokenCounts, n: int, vocab_size: int, compat: str, special_ids: Sequence[int] = ()) -> VocabMap:
    """The N-token draft vocabulary `compat`'s producer picks from these counts. `vocab_size`: the target's config
    vocabulary (text_config for VLMs). `special_ids`: the ids NeMo forces first (bos, eos, pad, unk)."""
    rule = rule_for(compat)
    _check_sizes(n, vocab_size)
    table = dict(counts.counts)
    if rule.padding == "refuse" and len(table) < n:
        raise VocabMapError(f"The corpus holds {len(table)} distinct counted tokens, fewer than -n {n}; "
                            f"{compat} refuses to pad (it asserts enough unique tokens).",
                            f"Pass -n of at most {len(table)}, or count a larger corpus.")
    if rule.padding == "set-order":
        chosen = _first_seen_top(_specforge_padded(table, n), n)
    elif rule.order == "specials-then-frequency":
        forced = list(dict.fromkeys(i for i in special_ids if 0 <= i < vocab_size))[:n]
        rest = {i: c for i, c in table.items() if i not in set(forced)}
        chosen = _lowest_unused(forced + _lowest_id_top(rest, n - len(forced)), n)
    elif rule.tie_break == "lowest-id":
        chosen = _lowest_id_top(table, n)
        chosen = _lowest_unused(chosen, n) if rule.padding == "lowest-unused" else chosen
    else:
        chosen = _first_seen_top(table, n)
    if any(i >= vocab_size for i in chosen):
        raise VocabMapError(f"The counted tokens include id {max(chosen)}, outside the target's config vocabulary "
                            f"({vocab_size}).", "The counts belong to another target; count with this target.")
    ids = sorted(chosen) if rule.order == "ascending" else chosen
    return VocabMap(tuple(ids), vocab_size)
