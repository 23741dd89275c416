"""Token counts over a corpus, kept in first-seen order: the producers that break ties with `Counter.most_common`
(SpecForge, the EAGLE reference, ModelOpt) pick among equal counts by the order ids were first inserted, so the order
is part of the data, not a detail. Built by `benchmark/token_counts.py`, which renders and masks the corpus."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class TokenCounts:
    counts: dict[int, int] = field(default_factory=dict)  # insertion order = first-seen order, as a Counter keeps it
    samples: int = 0  # rows (conversations or assistant turns) that were counted
    tokens: int = 0  # tokens counted (the masked ones)
    skipped: int = 0  # rows dropped or skipped by the length rule, or with nothing to count

    def add_sample(self, ids: Iterable[int], *, ascending_per_sample: bool) -> None:
        """One sample's counted ids. `ascending_per_sample`: the producer feeds `torch.unique(return_counts=True)`
        of each sample to `Counter.update`, so a sample's new ids enter in ascending order; otherwise ids enter in
        stream order (`Counter(list)`)."""
        ids = list(ids)
        if ascending_per_sample:
            ids = sorted(ids)
        for i in ids:
            self.counts[i] = self.counts.get(i, 0) + 1
        self.samples += 1
        self.tokens += len(ids)

    def as_json(self) -> dict:
        return {"ids": list(self.counts), "counts": list(self.counts.values()), "samples": self.samples,
                "tokens": self.tokens, "skipped": self.skipped}

    @classmethod
    def from_json(cls, data: dict) -> TokenCounts:
        return cls(dict(zip(data["ids"], data["counts"], strict=True)), data["samples"], data["tokens"],
                   data["skipped"])
