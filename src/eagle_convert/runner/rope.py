"""RoPE and its scaling types, computed as transformers' `modeling_rope_utils.py` (5.x) computes them: the same
float32 operations in the same order, so fp32 logits equal transformers' past the original context.

A scaling type is a row of ROPE_TYPES: a function (head_dim, theta, params, seq_len) -> (inv_freq, attention
scaling). Two types depend on the length of the sequence a forward reaches (`seq_len` = its last position + 1), as in
transformers' `dynamic_rope_update`: "dynamic" (NTK) recomputes its frequencies whenever a forward reaches further
than any before (and resets below the original length); "longrope" uses its long factors for a forward that reaches
past `original_max_position_embeddings`, its short ones otherwise. Keys already cached keep the rotation they were
written with, exactly as transformers' KV cache does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

RopeFunction = Callable[[int, float, dict, "int | None"], tuple[torch.Tensor, float]]


def _base_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def _default(head_dim: int, theta: float, params: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    return _base_inv_freq(head_dim, theta), 1.0


def _linear(head_dim: int, theta: float, params: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    return _base_inv_freq(head_dim, theta) / params["factor"], 1.0


def _dynamic(head_dim: int, theta: float, params: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    # transformers passes seq_len as an int64 tensor, so the new base is computed in float32: mirrored here
    max_len = params["max_position_embeddings"]
    seq = torch.maximum(torch.tensor(seq_len or max_len), torch.tensor(max_len))
    factor = params["factor"]
    base = theta * ((factor * seq / max_len) - (factor - 1)) ** (head_dim / (head_dim - 2))
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)), 1.0


def _llama3(head_dim: int, theta: float, params: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    inv_freq = _base_inv_freq(head_dim, theta)
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old_context = params["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < old_context / high) * ~(wavelen > old_context / low)
    return torch.where(is_medium, smoothed, scaled), 1.0


def _yarn_mscale(scale: float, mscale: float = 1) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(head_dim: int, theta: float, params: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    factor, original = params["factor"], params["original_max_position_embeddings"]
    attention_factor = params.get("attention_factor")
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim))
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (head_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # share of each frequency kept unscaled
    return interpolation * (1 - keep) + extrapolation * keep, attention_factor


def _longrope(head_dim: int, theta: float, params: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    factor, original = params["factor"], params["original_max_position_embeddings"]
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    long = seq_len is not None and seq_len > original
    ext_factors = torch.tensor(params["long_factor" if long else "short_factor"], dtype=torch.float32)
    shape = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (ext_factors * theta ** shape), attention_factor


# rope_type -> how its frequencies are computed; the parameters each type requires (checked by name when read).
ROPE_TYPES: dict[str, RopeFunction] = {
    "default": _default, "linear": _linear, "dynamic": _dynamic, "llama3": _llama3, "yarn": _yarn,
    "longrope": _longrope}
REQUIRED_PARAMS: dict[str, tuple[str, ...]] = {
    "linear": ("factor",), "dynamic": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
    "yarn": (), "longrope": ("short_factor", "long_factor")}
# Types whose frequencies depend on how far a forward reaches: recomputed per forward, never tabled once.
LENGTH_DEPENDENT = ("dynamic", "longrope")


class RotaryTable:
    """cos/sin rows per position, computed in float32 (times the type's attention scaling, as transformers does)
    and cast to the model's dtype. Static types keep a table grown on demand; length-dependent ones compute the rows a
    forward asks for from the frequencies that forward's reach selects."""

    def __init__(self, head_dim: int, theta: float, scaling: dict | None, dtype: torch.dtype,
                 device: torch.device | str):
        self.head_dim, self.theta, self.dtype, self.device = head_dim, theta, dtype, torch.device(device)
        self.rope_type = (scaling or {}).get("rope_type", "default")
        self.params = dict(scaling or {})
        self.function = ROPE_TYPES[self.rope_type]
        inv_freq, self.attention_scaling = self.function(head_dim, theta, self.params, None)
        self.inv_freq = self.original_inv_freq = inv_freq.to(self.device)
        original = self.params.get("max_position_embeddings") or self.params.get("original_max_position_embeddings")
        self.original_length = self.longest_seen = original
        self.cos = self.sin = torch.empty(0, head_dim, dtype=dtype, device=self.device)

    def __call__(self, positions: torch.Tensor, end: int, room: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [T, head_dim] at `positions`; `end` = the forward's last row's position + 1 (its reach); `room`:
        a bound on every position + 1 where rows are not ascending (a tree's slot count)."""
        if self.rope_type in LENGTH_DEPENDENT:
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
        if self.rope_type == "longrope":
            return self.function(self.head_dim, self.theta, self.params, end)[0].to(self.device)
        if end > self.longest_seen:
            self.inv_freq = self.function(self.head_dim, self.theta, self.params, end)[0].to(self.device)
            self.longest_seen = end
        elif end < self.original_length < self.longest_seen:
            self.inv_freq, self.longest_seen = self.original_inv_freq, self.original_length
        return self.inv_freq
