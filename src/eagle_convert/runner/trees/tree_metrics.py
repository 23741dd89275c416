"""Acceptance metrics of tree rounds, on the same definitions as chains (metrics.py) with k = the tree's levels:
  tau                  = 1 + accepted / rounds            (bonus included: EAGLE, SGLang "accept len", vLLM)
  per_position_rates[d-1] = rounds whose accepted path reached depth d / rounds   (vLLM's per-position analogue)
  histogram[a]         = rounds that accepted a nodes
and what only trees have:
  drafted              = nodes verified (root excluded), so acceptance_rate = accepted / nodes, vLLM's
                         num_accepted_tokens / num_draft_tokens in tree mode; not comparable with a chain's rate
  nodes_per_round      = drafted / rounds
  predicted_mean_acceptance_length = 1 + mean over rounds of sum(exp(node score)): what τ would be if the head's
                         probabilities were calibrated (docs/design/tree-drafting.md, "Predicted τ and shape choice");
                         far above the measured τ means an over-confident head or a broken conversion.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..metrics import AcceptanceStats


@dataclass(frozen=True)
class TreeAcceptanceStats(AcceptanceStats):
    nodes: int = 0  # drafted nodes verified over all rounds
    predicted: float = 0.0  # sum over rounds of sum(exp(score)) of the round's nodes

    @classmethod
    def from_rounds(cls, levels: int, accepted_per_round: Iterable[int], nodes_per_round: Iterable[int],
                    predicted_per_round: Iterable[float]) -> TreeAcceptanceStats:
        base = AcceptanceStats.from_accepted(levels, accepted_per_round)
        return cls(levels, base.histogram, nodes=sum(nodes_per_round), predicted=sum(predicted_per_round))

    @property
    def drafted(self) -> int:
        return self.nodes

    def merge(self, other: AcceptanceStats) -> TreeAcceptanceStats:
        merged = super().merge(other)
        return TreeAcceptanceStats(self.k, merged.histogram, nodes=self.nodes + getattr(other, "nodes", 0),
                                   predicted=self.predicted + getattr(other, "predicted", 0.0))

    def to_dict(self) -> dict:
        data = super().to_dict()
        drafts = self.drafts
        data["tree"] = {"nodes_per_round": self.nodes / drafts if drafts else None,
                        "predicted_mean_acceptance_length": 1 + self.predicted / drafts if drafts else None}
        return data


def merge_tree_stats(stats: Iterable[AcceptanceStats], levels: int) -> TreeAcceptanceStats:
    total = TreeAcceptanceStats(levels, (0,) * (levels + 1))
    for item in stats:
        total = total.merge(item)
    return total
