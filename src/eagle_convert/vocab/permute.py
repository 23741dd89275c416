"""Reordering a head's draft vocabulary: the LM-head rows move with their target ids, so the head proposes the same
target token with the same probability before and after (draft id order is a storage convention, not a model)."""

from __future__ import annotations

import torch

from .map import VocabMap
from .rules import VocabMapError


def row_order(current: VocabMap, wanted: VocabMap) -> torch.Tensor:
    """Indices into the current rows giving the wanted order: new row j = old row of wanted.target_ids[j]. Refuses a
    different set of ids: a trained EAGLE-3 head's vocabulary is fixed by training (its rows for other tokens were
    never learned), so re-pruning it to another map would propose tokens from untrained rows."""
    position = {t: i for i, t in enumerate(current.target_ids)}
    missing = [t for t in wanted.target_ids if t not in position]
    extra = len(current.target_ids) - (len(wanted.target_ids) - len(missing))
    if missing or extra:
        raise VocabMapError(
            f"The map selects another vocabulary than the head was trained with: {len(missing)} of its "
            f"{wanted.draft_vocab_size} target ids are not in the head's draft vocabulary "
            f"({current.draft_vocab_size} ids), and {extra} of the head's are not in the map.",
            "A trained EAGLE-3 head's vocabulary is fixed by training; only a reorder of the same ids can be applied. "
            "Train a head on the new map instead (its d2t/t2d files are the trainer's input).")
    return torch.tensor([position[t] for t in wanted.target_ids], dtype=torch.int64)


def permute_rows(weight: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    return weight.index_select(0, order)
