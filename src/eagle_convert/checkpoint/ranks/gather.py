"""Executing a gather: read each rank's shard by its byte range (file pages, or the Hub's range cache) and write
its rows into place in one preallocated [V, H] tensor, so peak memory is that one tensor. The padding rows past V
are checked to be exactly zero as they go by: vLLM and TRT-LLM write zeros there, and anything else means the rank
files are not laid out as the plan assumed (LoRA extra vocab, DP-attention sharding), which would splice wrong rows."""

from __future__ import annotations

import torch

from ...errors import LayoutError
from ..index import Checkpoint
from ..read import read_tensor
from .shards import REEXPORT, Gathered


def gather(ckpt: Checkpoint, g: Gathered) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The whole matrix, and each shard as read (views of the bytes read, for hashing), in rank order."""
    out = torch.empty(g.shape, dtype=g.dtype)
    vocab = g.shape[0]
    pieces, start = [], 0
    for rank, ref in enumerate(g.shards):
        shard = read_tensor(ckpt, ref)
        pieces.append(shard)
        if g.dim == 1:
            out[:, start:start + ref.shape[1]] = shard
            start += ref.shape[1]
            continue
        take = max(0, min(ref.shape[0], vocab - start))
        out[start:start + take] = shard[:take]
        tail = shard[take:]
        if tail.numel() and not bool((tail == 0).all()):
            bad = start + take + int((tail != 0).any(dim=1).nonzero()[0])
            raise LayoutError(f"Row {bad} of the gathered {g.name} ({ref.file}, rank {rank}) is past the vocabulary "
                              f"({vocab}) and not zero: the padding rows of a vLLM / TensorRT-LLM save are zero, so "
                              "these rank files are not laid out as expected (LoRA extra vocab, DP-attention "
                              "sharding, or a config.json of another model).", REEXPORT)
        start += ref.shape[0]
    return out, pieces
