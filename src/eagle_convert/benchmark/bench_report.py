"""Bench reports: per prompt and overall acceptance, speed and the lossless check, as `BenchReport.to_dict()` (the
`--json` schema, documented in bench.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..runner.metrics import AcceptanceStats, merge_stats
from ..runner.trees.tree_metrics import merge_tree_stats
from .gates import GateResult

# 2: prompts gained category, prompt_ids_sha256 and accepted_per_round; the gate and reference blocks were added.
# 3: settings.tree (the tree shape; mode "chain" for chains) and, for trees, acceptance.tree; k = the tree's levels.
# 4: prompts gained drafting_disabled_rounds; bench --context-lengths adds the `context` block (benchmark/context.py).
SCHEMA_VERSION = 4


def first_difference(a_turns: list[list[int]], b_turns: list[list[int]], keys: tuple[str, str]) -> dict | None:
    """Where two runs' outputs first differ, as {turn, index, keys[0]: a's token, keys[1]: b's token} (a token is
    None past its sequence's end; both None when one run has more turns), or None when they are identical."""
    for turn, (a, b) in enumerate(zip(a_turns, b_turns)):
        for index in range(max(len(a), len(b))):
            x, y = (a[index] if index < len(a) else None), (b[index] if index < len(b) else None)
            if x != y:
                return {"turn": turn, "index": index, keys[0]: x, keys[1]: y}
    if len(a_turns) != len(b_turns):
        return {"turn": min(len(a_turns), len(b_turns)), "index": 0, keys[0]: None, keys[1]: None}
    return None


def _rate(tokens: int | None, seconds: float | None) -> float | None:
    return tokens / seconds if tokens is not None and seconds else None


@dataclass
class PromptReport:
    id: str
    prompt_tokens: list[int]
    stats: AcceptanceStats
    output_token_ids: list[list[int]]
    wall_time_s: float
    baseline_output_token_ids: list[list[int]] | None = None
    baseline_wall_time_s: float | None = None
    category: str | None = None
    prompt_ids_sha256: list[str] = field(default_factory=list)  # per turn: sha256 of the prompt's token ids
    accepted_per_turn: list[list[int]] = field(default_factory=list)  # per turn, per verify round: drafts accepted
    # Greedy only, kept in memory for the reference gate: per turn, per round, the drafted ids and the draft margins.
    drafted_per_turn: list[list[list[int]]] = field(default_factory=list)
    margins_per_turn: list[list[list[float]]] = field(default_factory=list)
    # Our runner: verify rounds past the draft's position limit (k dummy drafts, runner/draft_gate.py); None: an
    # engine's counters cannot tell them from rounds that rejected every draft.
    drafting_disabled_rounds: int | None = None

    @property
    def generated_tokens(self) -> int:
        return sum(map(len, self.output_token_ids))

    @property
    def baseline_generated_tokens(self) -> int | None:
        return None if self.baseline_output_token_ids is None else sum(map(len, self.baseline_output_token_ids))

    @property
    def first_divergence(self) -> dict | None:
        if self.baseline_output_token_ids is None:
            return None
        return first_difference(self.output_token_ids, self.baseline_output_token_ids, ("speculative", "baseline"))

    def to_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "num_turns": len(self.prompt_tokens),
                "prompt_tokens": self.prompt_tokens, "prompt_ids_sha256": self.prompt_ids_sha256,
                "acceptance": self.stats.to_dict(),
                **_speed(self.generated_tokens, self.wall_time_s, self.baseline_generated_tokens,
                         self.baseline_wall_time_s),
                "drafting_disabled_rounds": self.drafting_disabled_rounds,
                "first_divergence": self.first_divergence, "output_token_ids": self.output_token_ids,
                "accepted_per_round": self.accepted_per_turn}


def _speed(tokens, seconds, base_tokens, base_seconds) -> dict:
    spec_rate, base_rate = _rate(tokens, seconds), _rate(base_tokens, base_seconds)
    return {"generated_tokens": tokens, "wall_time_s": seconds, "tokens_per_s": spec_rate,
            "baseline_generated_tokens": base_tokens, "baseline_wall_time_s": base_seconds,
            "baseline_tokens_per_s": base_rate,
            "speedup": spec_rate / base_rate if spec_rate and base_rate else None}


@dataclass
class BenchReport:
    settings: dict
    prompts: list[PromptReport] = field(default_factory=list)
    reference: BenchReport | None = None  # the head as released, benched in the same run (--reference-draft)
    gates: list[GateResult] = field(default_factory=list)
    engine: dict | None = None  # bench --engine vllm / --engine-url: which engine ran, how, and its own counters
    min_acceptance_length: float | None = None  # the τ floor asked for (gate.min_acceptance_length; None: none)
    compare: dict | None = None  # --compare: {ours: {settings, overall}, rows} (compare.py)
    positions: dict | None = None  # the position and RoPE checks run before the bench (positions/checks.py)
    environment: dict | None = None  # our runner: device, versions, TF32 and SDPA backends (runner/precision.py)
    context: dict | None = None  # --context-lengths: per bucket (context.py)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def stats(self) -> AcceptanceStats:
        if (self.settings.get("tree") or {}).get("mode", "chain") != "chain":
            return merge_tree_stats((p.stats for p in self.prompts), self.settings["k"])
        return merge_stats((p.stats for p in self.prompts), self.settings["k"])

    @property
    def mean_acceptance_length(self) -> float:
        return self.stats.mean_acceptance_length

    @property
    def lossless(self) -> dict:
        checked = self.settings["baseline"] and self.settings["temperature"] == 0
        mode = "not_checked" if not checked else "exact" if self.settings["dtype"] == "float32" else "first_divergence"
        diverged = [p.id for p in self.prompts if checked and p.first_divergence is not None]
        return {"mode": mode, "identical": (not diverged) if checked else None, "diverged_prompts": diverged}

    def to_dict(self) -> dict:
        baseline = self.settings["baseline"]
        overall = {"acceptance": self.stats.to_dict(), **_speed(
            sum(p.generated_tokens for p in self.prompts), sum(p.wall_time_s for p in self.prompts),
            sum(p.baseline_generated_tokens for p in self.prompts) if baseline else None,
            sum(p.baseline_wall_time_s for p in self.prompts) if baseline else None)}
        data = {"schema_version": SCHEMA_VERSION, "settings": self.settings, "overall": overall,
                "lossless": self.lossless, "prompts": [p.to_dict() for p in self.prompts],
                "gate": {"passed": self.passed, "checks": [g.to_dict() for g in self.gates],
                         "min_acceptance_length": self.min_acceptance_length}}
        if self.engine is not None:
            data["engine"] = self.engine
        if self.reference is not None:
            data["reference"] = {"settings": self.reference.settings,
                                 "overall": {"acceptance": self.reference.stats.to_dict()},
                                 "prompts": [{"id": p.id, "category": p.category, "acceptance": p.stats.to_dict(),
                                              "accepted_per_round": p.accepted_per_turn}
                                             for p in self.reference.prompts]}
        if self.compare is not None:
            data["compare"] = self.compare
        if self.positions is not None:
            data["positions"] = self.positions
        if self.environment is not None:
            data["environment"] = self.environment
        if self.context is not None:
            data["context"] = self.context
        return data
