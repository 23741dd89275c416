"""A hot-token map (FR-Spec; SGLang's `--speculative-token-map`) read for `bench --token-map` and `convert --to sglang
--token-map`: any map file the formats registry reads (SGLang's list of ids, SpecForge's vocab_mapping.pt,
speculators' d2t-N.npy, ModelOpt's d2t.pt with --from, safetensors), checked by the one map check against the
target's vocabulary before any model loads. A `.pt` holding one tensor or list is SGLang's format here (it is the
flag's own format), unless its name says d2t (ModelOpt's offsets)."""

from __future__ import annotations

from pathlib import Path

import torch

from .check import MapFacts, check_map, refuse_errors
from .formats import _torch_load, detect_format, read_stored
from .map import VocabMap
from .rules import VocabMapError


def token_map_format(path: Path) -> str:
    try:
        return detect_format(path)
    except VocabMapError:
        if path.suffix == ".pt" and isinstance(_torch_load(path), torch.Tensor):
            return "sglang"  # one tensor, name silent: the flag's own format
        raise


def read_token_map(path: str | Path, vocab_size: int, fmt: str | None = None) -> VocabMap:
    """The map's target ids (in draft order) over `vocab_size`; refused (VocabMapError, one paragraph) on any error
    finding of the one map check (empty, out of range, duplicates, a wrong dtype, a t2d that disagrees...): the verdict
    `vocab-map check --target-vocab-size` gives the same file."""
    path = Path(path)
    if not path.is_file():
        raise VocabMapError(f"The token map {path} is not a file.", "Pass a map file (e.g. SGLang's token map .pt).")
    stored = read_stored(path, fmt or token_map_format(path))
    refuse_errors(check_map(MapFacts(str(path), stored.d2t, stored.t2d, vocab_size)), str(path))  # as vocab-map check
    return VocabMap.from_d2t(stored.d2t, vocab_size)
