"""Read one tensor at a time, and only the bytes it occupies."""

from __future__ import annotations

import torch

from .index import Checkpoint, TensorRef
from .ranks.shards import Gathered


def read_tensor(ckpt: Checkpoint, ref: TensorRef) -> torch.Tensor:
    """The tensor `ref` names, backed by file pages where possible (no anonymous copy for local safetensors)."""
    if ref.offset is None:
        return ckpt.load_pickle(ref.file)[ref.name]
    buf = ckpt.source.read_range(ref.file, ref.offset, ref.nbytes, key=ref.name)
    if ref.nbytes == 0:
        return torch.empty(ref.shape, dtype=ref.dtype)
    flat = torch.frombuffer(buf, dtype=torch.uint8, count=ref.nbytes)
    return flat.view(ref.dtype).reshape(ref.shape)


def read_rows(ckpt: Checkpoint, ref: TensorRef, rows: list[int]) -> torch.Tensor:
    """Selected rows of a 2-D tensor, reading only their bytes (a row of a row-major tensor is contiguous); of a
    per-rank target's gathered tensor, from the shard(s) holding each row."""
    if isinstance(ref, Gathered):
        return torch.stack([torch.cat([read_rows(ckpt, shard, [local])[0] for shard, local in ref.row_pieces(r)])
                            for r in rows]) if rows else torch.empty((0, ref.shape[1]), dtype=ref.dtype)
    if ref.offset is None:
        return read_tensor(ckpt, ref)[rows].clone()
    row_bytes = ref.nbytes // ref.shape[0]
    out = torch.empty((len(rows), *ref.shape[1:]), dtype=ref.dtype)
    for i, r in enumerate(rows):
        buf = ckpt.source.read_range(ref.file, ref.offset + r * row_bytes, row_bytes, key=f"{ref.name}[{r}]")
        out[i] = torch.frombuffer(buf, dtype=torch.uint8, count=row_bytes).view(ref.dtype).reshape(ref.shape[1:])
    return out
