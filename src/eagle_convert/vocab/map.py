"""A draft vocabulary map: the target id of every draft id, in draft order, plus the target's vocabulary size.

Everything the producers store is derived from it: `d2t` (int64 offsets, target id = i + d2t[i]), `t2d` (bool over the
*config* vocabulary, text_config for VLMs) and SGLang's hot-token list (the target ids themselves)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def offsets_from_ids(ids: torch.Tensor) -> torch.Tensor:
    """d2t from target ids in draft order: int64 offsets, target id = i + d2t[i]."""
    return ids.to(torch.int64) - torch.arange(ids.numel(), dtype=torch.int64)


@dataclass(frozen=True)
class VocabMap:
    target_ids: tuple[int, ...]  # target id of draft id i, in draft order (ascending for most producers)
    target_vocab_size: int | None  # the config vocab t2d is sized by; None when the source did not say (d2t.pt)

    @classmethod
    def from_ids(cls, ids: Sequence[int] | torch.Tensor, target_vocab_size: int | None) -> VocabMap:
        if isinstance(ids, torch.Tensor):
            ids = ids.to(torch.int64).tolist()
        return cls(tuple(int(i) for i in ids), target_vocab_size)

    @classmethod
    def from_d2t(cls, d2t: torch.Tensor, target_vocab_size: int | None) -> VocabMap:
        return cls.from_ids(d2t.to(torch.int64) + torch.arange(d2t.numel(), dtype=torch.int64), target_vocab_size)

    @property
    def draft_vocab_size(self) -> int:
        return len(self.target_ids)

    def ids_tensor(self) -> torch.Tensor:
        return torch.tensor(self.target_ids, dtype=torch.int64)

    def d2t(self) -> torch.Tensor:
        """int64 offsets, as SpecForge, speculators and the engines store them."""
        return offsets_from_ids(self.ids_tensor())

    def t2d(self) -> torch.Tensor:
        """bool over the target (config) vocabulary: True where the draft vocabulary holds the target id."""
        if self.target_vocab_size is None:
            raise ValueError("t2d needs the target vocabulary size")
        t2d = torch.zeros(self.target_vocab_size, dtype=torch.bool)
        t2d[self.ids_tensor()] = True
        return t2d

    @property
    def ascending(self) -> bool:
        ids = self.target_ids
        return all(a < b for a, b in zip(ids, ids[1:]))

    def sorted(self) -> VocabMap:
        return VocabMap(tuple(sorted(self.target_ids)), self.target_vocab_size)

    def with_vocab_size(self, target_vocab_size: int) -> VocabMap:
        return VocabMap(self.target_ids, target_vocab_size)


def config_vocab_size(config: dict) -> int | None:
    """The vocabulary t2d is sized by: the config's, a VLM's text_config's (as SpecForge and speculators take it),
    never the tokenizer's (Qwen pads 151 665 tokens to 151 936 rows)."""
    text = config.get("text_config")
    if isinstance(text, dict) and "vocab_size" in text:
        return int(text["vocab_size"])
    return int(config["vocab_size"]) if "vocab_size" in config else None
