"""The checks `convert` makes before writing: a vocabulary map that fits, and a draft's own embedding copy
spot-checked against the target's (the output folder's own check, shared with `convert --mtp`, is io/overlap.py)."""

from __future__ import annotations

import torch

from ..checkpoint.read import read_rows, read_tensor
from ..draft.load import DraftHead
from ..targets.target_info import TargetInfo
from .derive import sampled_rows
from .plan import Plan
from .validate import check_vocab_map

EMBED_SAMPLE_ROWS = 64  # rows compared between a draft's embedding copy and the target's (reads ~64 rows, not V)


def check_head_vocab_map(head: DraftHead) -> None:
    d2t = head.tensors.get("d2t")
    t2d = head.tensors.get("t2d")
    ckpt = head.checkpoint
    check_vocab_map(read_tensor(ckpt, d2t) if d2t else None, read_tensor(ckpt, t2d) if t2d else None,
                    head.spec.vocab_size, ckpt.label)


def _target_files_read(plan: Plan) -> set[str]:
    return {leaf.file for t in plan.tensors for src in t.sources if src.origin == "target" for leaf in src.ref.leaves()}


def compares_embeddings(head: DraftHead, target: TargetInfo, plan: Plan, always: bool = False) -> bool:
    """Whether `compare_embeddings` will read and compare rows (what a dry run lists as "will check")."""
    if "embed_tokens.weight" not in head.tensors or not target.checkpoint.has(target.embed_name):
        return False
    if not always and target.checkpoint.file_of(target.embed_name) not in _target_files_read(plan):
        return False
    return not target.embedding_weight().quantized


def compare_embeddings(head: DraftHead, target: TargetInfo, plan: Plan, always: bool = False) -> dict | None:
    """When the draft carries its own embedding copy, spot-check it against the target's on evenly spaced rows.

    Only when the target file holding the embedding is read anyway (or `always`): opening another shard of a large
    target just for this check would cost what the conversion is designed to avoid."""
    ref = head.tensors.get("embed_tokens.weight")
    if ref is None or not target.checkpoint.has(target.embed_name):
        return None
    embed_file = target.checkpoint.file_of(target.embed_name)
    if not always and embed_file not in _target_files_read(plan):
        return {"rows_compared": 0, "max_abs_diff": None, "equal": None,
                "message": f"the draft's embed_tokens was not compared with the target's: it is in {embed_file}, which "
                           "the conversion does not otherwise read (pass --check-embedding to compare)"}
    stored = target.embedding_weight()
    if stored.quantized:  # codes, not values: the draft's copy cannot be compared row by row, and the result says so
        return {"rows_compared": 0, "max_abs_diff": None, "equal": None,
                "message": f"the draft's embed_tokens was not compared with the target's: the target stores "
                           f"{target.embed_name} quantized ({stored.scheme}), as codes, not values"}
    tref = stored.ref
    if tref.shape != ref.shape:
        return {"rows_compared": 0, "max_abs_diff": None, "equal": False,
                "message": f"draft embedding is {list(ref.shape)}, target's is {list(tref.shape)}"}
    rows = sampled_rows(ref.shape[0], EMBED_SAMPLE_ROWS)
    a = read_rows(head.checkpoint, ref, rows).to(torch.float32)
    b = read_rows(target.checkpoint, tref, rows).to(torch.float32)
    diff = float((a - b).abs().max()) if rows else 0.0
    return {"rows_compared": len(rows), "max_abs_diff": diff, "equal": diff == 0.0}

