"""The inverse frequencies of each RoPE type (types.py's rows), computed as transformers' `modeling_rope_utils.py`
(5.x) computes them: the same float32 operations in the same order, so the runner's fp32 logits equal transformers'
past the original context. The torch half of the table: `INVERSE_FREQUENCIES` has one function per row, and the
attention scale of each type is the row's own (types.py), shared with the config checks.

Each function takes (head_dim, theta, params, seq_len), `seq_len` being the length a forward reaches (its last
position + 1), which only the length-dependent types read: "dynamic" (NTK) scales its base with it, "longrope" picks
its long factors past `original_max_position_embeddings`."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

InverseFrequencies = Callable[[int, float, dict, "int | None"], torch.Tensor]


def _base_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def _default(head_dim: int, theta: float, params: dict, seq_len: int | None) -> torch.Tensor:
    return _base_inv_freq(head_dim, theta)


def _linear(head_dim: int, theta: float, params: dict, seq_len: int | None) -> torch.Tensor:
    return _base_inv_freq(head_dim, theta) / params["factor"]


def _dynamic(head_dim: int, theta: float, params: dict, seq_len: int | None) -> torch.Tensor:
    # transformers passes seq_len as an int64 tensor, so the new base is computed in float32: mirrored here
    max_len = params["max_position_embeddings"]
    seq = torch.maximum(torch.tensor(seq_len or max_len), torch.tensor(max_len))
    factor = params["factor"]
    base = theta * ((factor * seq / max_len) - (factor - 1)) ** (head_dim / (head_dim - 2))
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def _llama3(head_dim: int, theta: float, params: dict, seq_len: int | None) -> torch.Tensor:
    inv_freq = _base_inv_freq(head_dim, theta)
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old_context = params["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < old_context / high) * ~(wavelen > old_context / low)
    return torch.where(is_medium, smoothed, scaled)


def _yarn(head_dim: int, theta: float, params: dict, seq_len: int | None) -> torch.Tensor:
    factor, original = params["factor"], params["original_max_position_embeddings"]
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
    return interpolation * (1 - keep) + extrapolation * keep


def _longrope(head_dim: int, theta: float, params: dict, seq_len: int | None) -> torch.Tensor:
    long = seq_len is not None and seq_len > params["original_max_position_embeddings"]
    ext_factors = torch.tensor(params["long_factor" if long else "short_factor"], dtype=torch.float32)
    shape = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (ext_factors * theta ** shape)


# rope_type -> its inverse frequencies: one per row of types.ROPE_TYPES, in its order (a test holds the two together).
INVERSE_FREQUENCIES: dict[str, InverseFrequencies] = {
    "default": _default, "linear": _linear, "dynamic": _dynamic, "llama3": _llama3, "yarn": _yarn,
    "longrope": _longrope}
