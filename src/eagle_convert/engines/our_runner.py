"""Our bundled runner as an engine of the bench loop (benchmark/loop.py): speculative decoding of a draft head on the
target (chains, or trees of a shape), and plain decoding of the target for the baseline.

Unlike vLLM, which seeds each request, ours draws every request of a run from one generator, seeded with the
run's seed at its first request (the speculative engine: seed; the baseline: seed + 1): turns and prompts draw
different numbers, and the two engines never share a stream."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..runner.heads import HeadModule
from ..runner.metrics import AcceptanceStats
from ..runner.model import TargetModel
from ..runner.speculate import SpeculativeResult, plain_generate, speculative_generate
from ..runner.trees.shapes import TreeShape
from ..runner.trees.tree_metrics import TreeAcceptanceStats
from ..runner.trees.tree_speculate import TreeResult, tree_generate
from .generation import Generation


def timed(device: torch.device, run: Callable):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - start


@dataclass
class RoundsGeneration(Generation):
    """Our runner's answer: its tokens and, per verify round, what was accepted (drafted ids and margins in greedy;
    trees: nodes verified and predicted acceptance)."""
    result: SpeculativeResult | TreeResult | None = None

    def record_rounds(self, item) -> None:
        item.drafting_disabled_rounds = (item.drafting_disabled_rounds or 0) + getattr(
            self.result, "drafting_disabled_rounds", 0)
        item.accepted_per_turn.append(self.result.accepted_per_round)
        item.drafted_per_turn.append(self.result.drafted_per_round)
        item.margins_per_turn.append(self.result.margins_per_round)

    @staticmethod
    def prompt_stats(shape: TreeShape, generations: list[RoundsGeneration]) -> AcceptanceStats:
        rounds = [a for out in generations for a in out.result.accepted_per_round]
        if shape.mode == "chain":
            return AcceptanceStats.from_accepted(shape.levels, rounds)
        return TreeAcceptanceStats.from_rounds(shape.levels, rounds,
                                               [n for out in generations for n in out.result.nodes_per_round],
                                               [x for out in generations for x in out.result.predicted_per_round])


class _RunnerEngine:
    """One generator per run, seeded at the run's first request; `decode` (untimed) is the subclass's."""
    generator: torch.Generator | None = None
    device: torch.device

    def decode(self, ids: list[int], **decode):
        raise NotImplementedError

    def reserve(self, positions: int) -> None:
        """Allocate every KV cache for `positions` before the clock starts, so no timed forward grows one."""
        for model in (getattr(self, "target", None), getattr(self, "head", None)):
            if model is not None:
                model.reserve(positions)

    def _decode_timed(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                      stop_token_ids: tuple[int, ...]):
        if self.generator is None:
            self.generator = torch.Generator(self.device).manual_seed(seed)
        return timed(self.device, lambda: self.decode(ids, max_new_tokens=max_new_tokens, temperature=temperature,
                                                      eos_ids=stop_token_ids, generator=self.generator))

    def warm_up(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                stop_token_ids: tuple[int, ...]) -> None:
        """Outside the clock, on a generator of its own: the first forwards pay for allocation and kernel selection."""
        self.decode(ids, max_new_tokens=min(8, max_new_tokens), temperature=temperature, eos_ids=stop_token_ids,
                    generator=torch.Generator(self.device).manual_seed(seed))


class OursEngine(_RunnerEngine):
    """Speculative decoding: the chain runner for chains (exactly as before trees), the tree runner otherwise.
    `draft_limit`: the draft's position limit (runner/draft_gate.py), past which chains draft no more, as in vLLM;
    trees ignore it (no engine runs our trees)."""

    def __init__(self, target: TargetModel, head: HeadModule, shape: TreeShape, draft_limit: int | None = None):
        self.target, self.head, self.shape, self.device = target, head, shape, target.device
        self.draft_limit = draft_limit

    def decode(self, ids: list[int], **decode):
        if self.shape.mode == "chain":
            return speculative_generate(self.target, self.head, ids, k=self.shape.k, draft_limit=self.draft_limit,
                                        **decode)
        return tree_generate(self.target, self.head, ids, shape=self.shape, **decode)

    def generate(self, ids: list[int], **request) -> RoundsGeneration:
        result, seconds = self._decode_timed(ids, **request)
        return RoundsGeneration(result.tokens, seconds, result=result)


class PlainEngine(_RunnerEngine):
    """Plain decoding of the target, one forward per token: the baseline."""

    def __init__(self, target: TargetModel):
        self.target, self.device = target, target.device

    def decode(self, ids: list[int], **decode) -> list[int]:
        return plain_generate(self.target, ids, **decode)

    def generate(self, ids: list[int], **request) -> Generation:
        tokens, seconds = self._decode_timed(ids, **request)
        return Generation(tokens, seconds)
