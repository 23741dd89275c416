"""Building blocks shared by the target model and the draft heads: RoPE, RMS norm, a per-position KV cache, attention
and the SwiGLU MLP, as plain functions over plain tensors (weights are read by name; there is no nn.Module tree).

The KV cache is static and written *by position*: a verify pass writes k+1 rows, and rejecting some of them needs no
cleanup, because the next pass overwrites those positions before any query can see them (the causal mask only admits
keys at positions <= the query's). Rollback is therefore just the caller choosing the next position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from .masks import ForwardMasks, attend

if TYPE_CHECKING:
    from .rotary_table import RotaryTable

GetTensor = Callable[[str], torch.Tensor]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Same order of operations as HF's LlamaRMSNorm, so half-precision runs round the same way.
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class KVCache:
    """Keys/values of one attention layer, indexed by absolute position; capacity doubles when a write needs it.

    Its tensors are always normal (never inference) tensors, whatever mode they are made in: the first write past the
    capacity happens inside the model's inference_mode forward, and a cache that turned into inference tensors there
    could no longer be updated in place outside it (a tree's path commit, a test), only past a length."""

    def __init__(self, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device | str, capacity=256):
        with torch.inference_mode(False):
            self.k = torch.zeros(1, num_kv_heads, capacity, head_dim, dtype=dtype, device=device)
            self.v = torch.zeros_like(self.k)

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def write(self, positions: torch.Tensor, end: int, k: torch.Tensor, v: torch.Tensor):
        """Store k/v [1, kv_heads, T, d] at `positions`; return all keys/values at positions < end."""
        if end > self.capacity:
            self._grow(max(end, 2 * self.capacity))
        self.k.index_copy_(2, positions, k)
        self.v.index_copy_(2, positions, v)
        return self.k[:, :, :end], self.v[:, :, :end]

    def reserve(self, slots: int) -> None:
        """Allocate room for `slots` positions now (a bench, before its clock starts), so no write grows the cache."""
        if slots > self.capacity:
            self._grow(slots)

    def _grow(self, capacity: int) -> None:
        with torch.inference_mode(False):  # see the class docstring
            extra = capacity - self.capacity
            self.k = torch.cat([self.k, self.k.new_zeros(*self.k.shape[:2], extra, self.k.shape[3])], 2)
            self.v = torch.cat([self.v, self.v.new_zeros(*self.v.shape[:2], extra, self.v.shape[3])], 2)

    def move(self, sources: torch.Tensor, start: int) -> None:
        """Copy the rows at slots `sources` to slots start, start+1, ... (a tree's accepted path to its sequence
        positions). Gathered before writing, so overlapping source and destination slots are safe."""
        dest = torch.arange(start, start + len(sources), device=self.k.device)
        self.k.index_copy_(2, dest, self.k.index_select(2, sources))
        self.v.index_copy_(2, dest, self.v.index_select(2, sources))


@dataclass(frozen=True)
class TreeAttention:
    """How the rows of one tree forward use the cache, when RoPE position, cache slot and visibility part ways:
    siblings share a position but need their own slots, and a node sees only the prefix and its ancestors.
    slots [T]: the cache slot each row writes; mask [T, end]: the slots each row attends to (end = slots in use);
    key_positions [end]: the RoPE position of each slot, for sliding windows."""
    slots: torch.Tensor
    mask: torch.Tensor
    key_positions: torch.Tensor

    @property
    def end(self) -> int:
        return self.mask.shape[1]


@dataclass
class Attention:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    num_heads: int
    num_kv_heads: int
    head_dim: int
    cache: KVCache
    q_bias: torch.Tensor | None = None
    k_bias: torch.Tensor | None = None
    v_bias: torch.Tensor | None = None
    o_bias: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    eps: float = 1e-6
    sliding_window: int | None = None

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, end: int, rope: RotaryTable,
                 masks: TreeAttention | ForwardMasks | None = None) -> torch.Tensor:
        """x [1, T, in] at `positions` (ascending, last = end - 1) -> [1, T, hidden]; writes this layer's cache.
        `masks`: the forward's shared ForwardMasks (built here when None); a tree's rows are written to its slots and
        see its mask instead (positions may repeat)."""
        if not isinstance(masks, ForwardMasks):
            masks = ForwardMasks.build(positions, end, masks)
        tokens = x.shape[1]
        q = F.linear(x, self.q, self.q_bias).view(1, tokens, self.num_heads, self.head_dim)
        k = F.linear(x, self.k, self.k_bias).view(1, tokens, self.num_kv_heads, self.head_dim)
        v = F.linear(x, self.v, self.v_bias).view(1, tokens, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = rms_norm(q, self.q_norm, self.eps), rms_norm(k, self.k_norm, self.eps)
        cos, sin = rope(positions, end, masks.end)  # the reach; a tree's slot count bounds its positions
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        slots = positions if masks.tree is None else masks.tree.slots
        keys, values = self.cache.write(slots, masks.end, k, v.transpose(1, 2))
        out = attend(q, keys, values, masks.mask(self.sliding_window, self.num_heads // self.num_kv_heads))
        return F.linear(out.transpose(1, 2).reshape(1, tokens, -1), self.o, self.o_bias)


@dataclass
class Mlp:
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    gate_bias: torch.Tensor | None = None
    up_bias: torch.Tensor | None = None
    down_bias: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.silu(F.linear(x, self.gate, self.gate_bias)) * F.linear(x, self.up, self.up_bias)
        return F.linear(hidden, self.down, self.down_bias)


def load_attention(get, prefix: str, *, num_heads, num_kv_heads, head_dim, dtype, device, qkv_bias=False,
                   o_bias=False, qk_norm=False, eps=1e-6, sliding_window=None) -> Attention:
    """Attention weights under `{prefix}self_attn.`; `get` is a get_tensor already casting to dtype/device."""
    p = f"{prefix}self_attn."
    return Attention(
        q=get(p + "q_proj.weight"), k=get(p + "k_proj.weight"), v=get(p + "v_proj.weight"), o=get(p + "o_proj.weight"),
        num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
        cache=KVCache(num_kv_heads, head_dim, dtype, device),
        q_bias=get(p + "q_proj.bias") if qkv_bias else None,
        k_bias=get(p + "k_proj.bias") if qkv_bias else None,
        v_bias=get(p + "v_proj.bias") if qkv_bias else None,
        o_bias=get(p + "o_proj.bias") if o_bias else None,
        q_norm=get(p + "q_norm.weight") if qk_norm else None,
        k_norm=get(p + "k_norm.weight") if qk_norm else None,
        eps=eps, sliding_window=sliding_window,
    )


def load_mlp(get, prefix: str, bias: bool = False) -> Mlp:
    p = f"{prefix}mlp."
    biases = [get(p + f"{n}_proj.bias") if bias else None for n in ("gate", "up", "down")]
    return Mlp(get(p + "gate_proj.weight"), get(p + "up_proj.weight"), get(p + "down_proj.weight"), *biases)


def owned_copy(tensor: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """`tensor` in a fresh, contiguous allocation of `dtype` on `device`, even when it already is of that dtype and
    device (where `.to()` would return the reader's own tensor). A checkpoint reader may hand out a view into an
    mmapped file at any byte offset, or a non-contiguous slice; some CPUs' BLAS kernels round differently on
    misaligned operands, so the runner's numbers would depend on how the bytes were stored. torch allocations are
    64-byte aligned on CPU (and more on CUDA)."""
    with torch.inference_mode(False):  # weights are never inference tensors, whoever loads them
        out = torch.empty(tuple(tensor.shape), dtype=dtype, device=device)
        out.copy_(tensor)  # the same conversion `.to(dtype)` does
    return out


def cast_reader(get_tensor: GetTensor, dtype: torch.dtype, device) -> GetTensor:
    """The reader the runner loads every weight through: each tensor an owned, aligned copy (see owned_copy)."""
    return lambda name: owned_copy(get_tensor(name), dtype, device)


def as_positions(positions: torch.Tensor | Sequence[int], device) -> tuple[torch.Tensor, int]:
    """Flat int64 positions and `end` = last position + 1 (positions are ascending and contiguous in every caller).
    A `range` costs no device round trip; a device tensor costs one sync to read its last value."""
    if isinstance(positions, range):
        return torch.arange(positions.start, positions.stop, device=device), positions.stop
    positions = torch.as_tensor(positions, dtype=torch.int64, device=device).reshape(-1)
    return positions, int(positions[-1]) + 1
