"""Maps and draft checkpoints: the facts `check` needs from a head (its d2t/t2d, LM-head rows, config sizes), maps
written into an output folder, and a map applied to a head (rows permuted, d2t/t2d replaced). Outputs are staged
and moved into place only when complete (io/staging.py): nothing is written on any refusal."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint.index import Checkpoint
from ..checkpoint.read import read_tensor
from ..errors import EXISTS_HINT, OUT_OPTION, OutputPathError
from ..io.staging import staged_output
from .check import MapFacts, check_map, refuse_errors
from .formats import StorageFormat, write_tensors
from .map import VocabMap, config_vocab_size
from .permute import permute_rows, row_order
from .rules import VocabMapError

LM_HEAD = "lm_head.weight"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _optional(ckpt: Checkpoint, name: str) -> torch.Tensor | None:
    return read_tensor(ckpt, ckpt.ref(name)) if ckpt.has(name) else None


def head_facts(ckpt: Checkpoint, vocab_size: int | None = None, ascending_required: str | None = None) -> MapFacts:
    """A head's map facts. `vocab_size`: the target's config vocabulary when given (--target), else the head's."""
    config = ckpt.config
    rows = ckpt.ref(LM_HEAD).shape[0] if ckpt.has(LM_HEAD) else None
    stated = config.get("draft_vocab_size")
    return MapFacts(ckpt.label, _optional(ckpt, "d2t"), _optional(ckpt, "t2d"),
                    vocab_size if vocab_size is not None else config_vocab_size(config), rows,
                    int(stated) if stated is not None else None, ascending_required)


def check_out(out: Path, force: bool, inputs: list[Path]) -> None:
    """Refuse an output that exists (without --force) or would touch an input."""
    out = out.resolve()
    for path in inputs:
        path = path.resolve()
        if out == path or out in path.parents or path in out.parents:
            raise OutputPathError(f"The output {out} overlaps the input {path}.",
                                  f"Pick another {OUT_OPTION} folder; inputs are never modified.")
    if out.exists() and not force:
        raise OutputPathError(f"{out} already exists.", EXISTS_HINT)


def write_maps(maps: list[VocabMap], fmt: StorageFormat, out: Path, force: bool) -> list[Path]:
    """Every map into one folder, in `fmt`, its draft vocabulary size in each file name."""
    for vmap in maps:
        if fmt.needs_vocab and vmap.target_vocab_size is None:
            raise VocabMapError(f"The {fmt.name} format stores t2d, sized by the target vocabulary, which the input "
                                "does not state.", "Pass --target-vocab-size N or --target TARGET.")
        if fmt.ascending_only and not vmap.ascending:
            raise VocabMapError(f"The map is not in ascending target-id order, and {fmt.name}'s consumers need it "
                                "(SpecForge's compact teacher requires nonzero(t2d) == d2t + arange).",
                                "Sorting the map alone would re-point every draft row: write it into its head with "
                                "--apply-to HEAD, which permutes the LM-head rows with it, or pick --format "
                                "safetensors/modelopt/sglang, which keep any order.")
    with staged_output(out, force) as staging:
        for vmap in maps:
            fmt.write(vmap, staging)
    return [out / name for vmap in maps for name in fmt.file_names(vmap.draft_vocab_size)]


@dataclass(frozen=True)
class Applied:
    out: Path
    map: VocabMap
    permuted: bool  # LM-head rows were reordered (the head's order convention changed)


def head_map(ckpt: Checkpoint, facts: MapFacts, given: VocabMap | None) -> VocabMap:
    """The target ids of the head's rows, in row order: its own d2t; a full-vocabulary head's identity; or, for a
    reduced head saved without d2t, the map given (that it was trained with)."""
    vocab = facts.vocab_size
    if vocab is None:
        raise VocabMapError(f"{ckpt.label}'s config states no vocab_size.",
                            "Give the head's config.json its target's vocab_size.")
    if facts.d2t is not None:
        return VocabMap.from_d2t(facts.d2t, vocab)
    if facts.lm_head_rows is None or facts.lm_head_rows == vocab:
        return VocabMap(tuple(range(vocab)), vocab)
    if given is None or given.draft_vocab_size != facts.lm_head_rows:
        raise VocabMapError(f"{ckpt.label} has a reduced LM head ({facts.lm_head_rows} rows) and no d2t, so which "
                            "target id each row is cannot be known.",
                            "Apply the map it was trained with: eagle-convert vocab-map convert MAP --apply-to HEAD.")
    return given


def apply_to_head(ckpt: Checkpoint, head_dir: Path, wanted: VocabMap, out: Path, force: bool,
                  describes_head: bool) -> Applied:
    """Write `wanted` into the head: rows permuted into its order, d2t/t2d replaced, draft_vocab_size stated.
    `describes_head`: the map may stand for a reduced head's missing d2t (convert), not so a freshly built one."""
    facts = head_facts(ckpt)
    refuse_errors([f for f in check_map(facts) if f.name != "missing-d2t" or describes_head], ckpt.label)
    vocab = facts.vocab_size
    if wanted.target_vocab_size is not None and vocab is not None and wanted.target_vocab_size != vocab:
        raise VocabMapError(f"The map is over a target vocabulary of {wanted.target_vocab_size}, the head's config "
                            f"says {vocab}.", "Build the map for the target this head belongs to.")
    if not ckpt.has(LM_HEAD):
        raise VocabMapError(f"{ckpt.label} has no {LM_HEAD}: it uses the target's LM head over the full vocabulary.",
                            "A draft vocabulary needs the head's own LM head rows; this head has none to reorder.")
    current = head_map(ckpt, facts, wanted if describes_head else None)
    order = row_order(current, wanted)
    wanted = wanted.with_vocab_size(vocab)
    tensors = {name: read_tensor(ckpt, ref) for name, ref in ckpt.refs().items()}
    tensors[LM_HEAD] = permute_rows(tensors[LM_HEAD], order).contiguous()
    tensors["d2t"], tensors["t2d"] = wanted.d2t(), wanted.t2d()
    config = {**ckpt.config, "draft_vocab_size": wanted.draft_vocab_size}
    with staged_output(out, force) as staging:
        write_tensors(staging / "model.safetensors", tensors)
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for extra in sorted(head_dir.iterdir()):
            if extra.is_file() and extra.name != "config.json" and not extra.name.endswith(WEIGHT_SUFFIXES) \
                    and extra.name not in WEIGHT_INDEXES:
                shutil.copy2(extra, staging / extra.name)  # README, generation config: the head's own files
    return Applied(out, wanted, not torch.equal(order, torch.arange(order.numel())))
