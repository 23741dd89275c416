"""The rotary table the runner's attention reads: cos/sin rows per position, from the inverse frequencies and the
attention scale of the config's RoPE type (the package's one RoPE table, rope/), as transformers computes them.

Two types depend on the length of the sequence a forward reaches (`seq_len` = its last position + 1), as in
transformers' `dynamic_rope_update`: "dynamic" (NTK) recomputes its frequencies whenever a forward reaches further
than any before (and resets below the original length); "longrope" uses its long factors for a forward that reaches
past `original_max_position_embeddings`, its short ones otherwise. Keys already cached keep the rotation they were
written with, exactly as transformers' KV cache does.
"""

from __future__ import annotations

import torch

from ..rope.frequencies import INVERSE_FREQUENCIES
from ..rope.types import ROPE_TYPES


class RotaryTable:
    """cos/sin rows per position, computed in float32 (times the type's attention scaling, as transformers does)
    and cast to the model's dtype. Static types keep a table grown on demand; length-dependent ones compute the rows a
    forward asks for from the frequencies that forward's reach selects."""

    def __init__(self, head_dim: int, theta: float, scaling: dict | None, dtype: torch.dtype,
                 device: torch.device | str):
        self.head_dim, self.theta, self.dtype, self.device = head_dim, theta, dtype, torch.device(device)
        self.rope_type = (scaling or {}).get("rope_type", "default")
        self.params = dict(scaling or {})
        self.row, self.function = ROPE_TYPES[self.rope_type], INVERSE_FREQUENCIES[self.rope_type]
        self.attention_scaling = self.row.attention_scaling(self.params)
        inv_freq = self.function(head_dim, theta, self.params, None)
        self.inv_freq = self.original_inv_freq = inv_freq.to(self.device)
        original = self.params.get("max_position_embeddings") or self.params.get("original_max_position_embeddings")
        self.original_length = self.longest_seen = original
        self.cos = self.sin = torch.empty(0, head_dim, dtype=dtype, device=self.device)

    def __call__(self, positions: torch.Tensor, end: int, room: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [T, head_dim] at `positions`; `end` = the forward's last row's position + 1 (its reach); `room`:
        a bound on every position + 1 where rows are not ascending (a tree's slot count)."""
        if self.row.length_dependent:
            return self._rows(self._frequencies_for(end), positions)
        size = max(end, room)
        if size > len(self.cos):
            self.cos, self.sin = self._rows(self.inv_freq, torch.arange(max(size, 2 * len(self.cos)),
                                                                        device=self.device))
        return self.cos[positions], self.sin[positions]

    def _rows(self, inv_freq: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling
        return cos.to(self.dtype), sin.to(self.dtype)

    def _frequencies_for(self, end: int) -> torch.Tensor:
        """transformers' dynamic_rope_update: dynamic grows with the furthest reach and resets below the original
        length; longrope picks long or short factors per forward."""
        if not self.row.limit_sets_schedule:  # longrope: the reach of this forward alone
            return self.function(self.head_dim, self.theta, self.params, end).to(self.device)
        if end > self.longest_seen:
            self.inv_freq = self.function(self.head_dim, self.theta, self.params, end).to(self.device)
            self.longest_seen = end
        elif end < self.original_length < self.longest_seen:
            self.inv_freq, self.longest_seen = self.original_inv_freq, self.original_length
        return self.inv_freq
