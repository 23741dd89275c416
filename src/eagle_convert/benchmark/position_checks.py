"""The position and RoPE checks (positions/checks.py) before a bench, from the draft's and the target's configs
alone: a RoPE error is refused before any model loads; the findings go into the report (`positions`)."""

from __future__ import annotations

from collections.abc import Iterable

from ..layouts import detect_layout
from ..positions.checks import PositionOptions, PositionReport, check_positions, refuse_rope_errors
from .inputs import BenchInputs


def bench_max_model_len(explicit: int | None, context_lengths: Iterable[int] = (), max_new_tokens: int = 0
                        ) -> int | None:
    """--max-model-len, else the longest context the run will use: its longest context bucket plus
    --max-new-tokens. None without buckets: the built-in prompts are short, and the checks then compare the draft
    with the target only."""
    if explicit is not None:
        return explicit
    longest = max(context_lengths, default=0)
    return longest + max_new_tokens if longest else None


def check_before_bench(inputs: BenchInputs, options: PositionOptions) -> PositionReport | None:
    """The checks for the draft on the target (None without a draft: a server's head is its own), RoPE errors
    refused."""
    if inputs.draft_name is None:
        return None
    draft_ckpt = inputs.draft.checkpoint
    layout, _ = detect_layout(draft_ckpt.config, frozenset(draft_ckpt.names()))
    if layout is None:
        return None  # not a head: loading it says why, with the layouts it was tried against
    target_config = inputs.target.checkpoint.config
    report = check_positions(layout.flat_config(draft_ckpt.config), target_config, options)
    refuse_rope_errors(report)
    return report
