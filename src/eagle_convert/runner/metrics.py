"""Acceptance metrics, defined exactly as the EAGLE papers and vLLM V1 report them (docs/formats.md §4).

A verify round ("draft") proposes k tokens and accepts a of them (the longest prefix matching the target), emitting
a + 1 tokens. From the histogram h[a] = number of rounds that accepted a:
  drafts   = sum(h)                    drafted = k * drafts              accepted = sum(a * h[a])
  mean acceptance length tau = 1 + accepted / drafts
  draft acceptance rate      = accepted / drafted
  per-position rate[i]       = rounds whose first i+1 drafts were all accepted / drafts   (unconditional, as vLLM)
With no rounds at all the ratios are undefined: they are NaN here and null in `to_dict()`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class AcceptanceStats:
    k: int
    histogram: tuple[int, ...]  # histogram[a] = verify rounds that accepted exactly a drafts; length k + 1

    def __post_init__(self):
        if self.k < 1 or len(self.histogram) != self.k + 1 or any(n < 0 for n in self.histogram):
            raise ValueError(f"histogram must hold k + 1 = {self.k + 1} non-negative counts, got {self.histogram}")

    @classmethod
    def from_accepted(cls, k: int, accepted_per_round: Iterable[int]) -> AcceptanceStats:
        counts = [0] * (k + 1)
        for accepted in accepted_per_round:
            if not 0 <= accepted <= k:
                raise ValueError(f"a round cannot accept {accepted} of {k} drafts")
            counts[accepted] += 1
        return cls(k, tuple(counts))

    @property
    def drafts(self) -> int:
        return sum(self.histogram)

    @property
    def drafted(self) -> int:
        return self.k * self.drafts

    @property
    def accepted(self) -> int:
        return sum(a * n for a, n in enumerate(self.histogram))

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.accepted / self.drafts if self.drafts else math.nan

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafts else math.nan

    @property
    def per_position_rates(self) -> tuple[float, ...]:
        if not self.drafts:
            return (math.nan,) * self.k
        return tuple(sum(self.histogram[i + 1:]) / self.drafts for i in range(self.k))

    def merge(self, other: AcceptanceStats) -> AcceptanceStats:
        if other.k != self.k:
            raise ValueError(f"cannot merge stats for k={self.k} and k={other.k}")
        return AcceptanceStats(self.k, tuple(a + b for a, b in zip(self.histogram, other.histogram)))

    def to_dict(self) -> dict:
        """JSON-ready; undefined ratios (no rounds) become None."""
        def finite(x: float):
            return None if math.isnan(x) else x
        return {
            "k": self.k,
            "histogram": list(self.histogram),
            "drafts": self.drafts,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "mean_acceptance_length": finite(self.mean_acceptance_length),
            "acceptance_rate": finite(self.acceptance_rate),
            "per_position_rates": [finite(r) for r in self.per_position_rates],
        }


def merge_stats(stats: Iterable[AcceptanceStats], k: int) -> AcceptanceStats:
    """Pool rounds over prompts: overall tau is the round-weighted mean, not the mean of per-prompt taus."""
    total = AcceptanceStats(k, (0,) * (k + 1))
    for item in stats:
        total = total.merge(item)
    return total
