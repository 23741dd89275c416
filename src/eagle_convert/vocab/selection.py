"""Each producer's selection rule, as data: which tokens it counts (mask), how it treats long samples, how it breaks
ties at the cut-off, how it pads a corpus with fewer distinct tokens than N, and in which order it lays out the draft
ids. `select` turns `TokenCounts` into a `VocabMap` the way that producer's own code does (the tests hold it
tensor-equal to SpecForge 0.2.0's `process_token_dict_to_mappings` and speculators 0.9.0's
`build_vocab_mappings_from_distribution`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ShapeMismatchError
from .counts import TokenCounts
from .map import VocabMap


class VocabMapError(ShapeMismatchError):
    """A vocabulary map that cannot be built, read, written or applied as asked, or that fails its check (a kind of
    shape mismatch: `convert` has always refused a bad map as one)."""


@dataclass(frozen=True)
class SelectionRule:
    compat: str
    mask: str  # "assistant-span" | "after-generation-prompt" | "all-tokens"
    length: str  # "truncate" | "drop" | "none": what happens to a sample longer than --max-length
    tie_break: str  # "first-seen" (Counter.most_common) | "lowest-id"
    padding: str  # "set-order" | "lowest-unused" | "none" (short map) | "refuse"
    order: str  # "ascending" | "frequency" (draft id 0 = most frequent) | "specials-then-frequency"
    ascending_per_sample: bool  # a sample's ids enter the counter via torch.unique (ascending) or in stream order
    source: str  # where the rule is read from in the producer's code


RULES: dict[str, SelectionRule] = {r.compat: r for r in (
    SelectionRule("specforge", "assistant-span", "truncate", "first-seen", "set-order", "ascending", True,
                  "specforge 0.2.0 data/preprocessing.py: generate_vocab_mapping_file, process_token_dict_to_mappings"),
    SelectionRule("speculators", "after-generation-prompt", "truncate", "lowest-id", "lowest-unused", "ascending", True,
                  "speculators 0.9.0 train/vocab_mapping.py: build_vocab_mappings_from_distribution"),
    SelectionRule("eagle", "assistant-span", "drop", "first-seen", "none", "ascending", True,
                  "SafeAILab EAGLE eagle/traineagle3/cnets.py (build_dataset_rank, Counter.most_common)"),
    SelectionRule("modelopt", "all-tokens", "none", "first-seen", "refuse", "frequency", False,
                  "NVIDIA ModelOpt examples/speculative_decoding/scripts/calibrate_draft_vocab.py"),
    SelectionRule("nemo", "assistant-span", "truncate", "lowest-id", "lowest-unused", "specials-then-frequency",
                  True, "NeMo Automodel recipes/llm/train_eagle3.py (forced specials, stable argsort)"),
)}
COMPATS = tuple(RULES)


def rule_for(compat: str) -> SelectionRule:
    if compat not in RULES:
        raise VocabMapError(f"Unknown --compat {compat!r}.", f"Use one of: {', '.join(COMPATS)}.")
    return RULES[compat]


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
