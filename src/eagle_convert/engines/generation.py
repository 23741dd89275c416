"""What every engine returns for one prompt, and vLLM's spec-decode counters read as our acceptance statistics.

vLLM counts, per request: drafts (verify rounds), draft tokens, accepted tokens, and accepted tokens per position
(position i: rounds whose first i+1 drafts were all accepted, the unconditional rate's numerator, metrics.py). The
per-position counts determine the histogram of accepted drafts per round exactly: h[0] = drafts - pos[0],
h[a] = pos[a-1] - pos[a], h[k] = pos[k-1]; so τ, rates and the report are computed by the same code as ours."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import EngineError
from ..runner.metrics import AcceptanceStats

COUNTER_KEYS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")


@dataclass
class Generation:
    """One answer. An engine that counts (vLLM) returns these; our runner a RoundsGeneration (engines/our_runner.py),
    which keeps its rounds instead. The bench loop (benchmark/loop.py) reads acceptance through the type."""
    tokens: list[int]
    seconds: float
    counters: dict | None = None  # COUNTER_KEYS moved by this request; None for plain decoding
    # rounds verified with drafting off (vllm_batch.py; None: not measured); keyword-only, so that a subclass's own
    # fields can never be filled with it by position
    disabled_rounds: int | None = field(default=None, kw_only=True)

    def record_rounds(self, item) -> None:
        """Per-round data for the prompt's report (PromptReport): an engine's counters have none, only (with
        --concurrency) the rounds its batch-wide position rule ran with drafting disabled."""
        if self.disabled_rounds is not None:
            item.drafting_disabled_rounds = (item.drafting_disabled_rounds or 0) + self.disabled_rounds

    @staticmethod
    def prompt_stats(shape, generations: list[Generation]) -> AcceptanceStats:
        """A prompt's acceptance from its turns: the counters they moved, summed."""
        counters = zero_counters(shape.levels)
        for out in generations:
            counters = add_counters(counters, out.counters)
        return stats_from_counters(shape.levels, counters)


def zero_counters(k: int) -> dict:
    return {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": [0] * k}


def add_counters(a: dict, b: dict) -> dict:
    return {key: ([x + y for x, y in zip(a[key], b[key])] if isinstance(a[key], list) else a[key] + b[key])
            for key in COUNTER_KEYS}


def stats_from_counters(k: int, counters: dict) -> AcceptanceStats:
    drafts, per_pos = counters["num_drafts"], list(counters["num_accepted_tokens_per_pos"])
    if len(per_pos) != k:
        raise EngineError(f"The engine reports accepted tokens for {len(per_pos)} positions, not k = {k}.",
                          "The engine runs another number of speculative tokens than asked: check --engine-arg.")
    bounds = [drafts] + per_pos + [0]
    histogram = tuple(bounds[a] - bounds[a + 1] for a in range(k + 1))
    if any(n < 0 for n in histogram) or sum(per_pos) != counters["num_accepted_tokens"]:
        raise EngineError(f"The engine's spec-decode counters are inconsistent ({counters}).",
                          "Another request moved them during the run: bench a server nobody else uses, or retry.")
    return AcceptanceStats(k, histogram)
