"""The `rope_freqs` tensor llama.cpp runs llama3-scaled RoPE from: one divisor per rotary pair (ggml_rope_ext divides
the pair's angle by it), as llama.cpp b11434's converter computes it (conversion/llama.py,
LlamaModel.generate_extra_tensors): the same float32 operations in the same order, element by element, so the file
is bit-equal to the converter's. Its divisors reproduce transformers' llama3 frequencies (frequencies.py `_llama3`):
base frequency / factor = scaled frequency, to float32 rounding (a test holds the two together).

The parameters are the schedule with transformers' defaults filled (schedule.py `engine_rope`), not the converter's
own fallbacks (factor 8, low 1, high 4, original context 8192 when a key is missing): where a config leaves
`original_max_position_embeddings` out, transformers and vLLM take `max_position_embeddings`, which is what the head
was trained with."""

from __future__ import annotations

import math

import torch

LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def llama3_rope_factors(head_dim: int, theta: float, params: dict) -> torch.Tensor:
    """float32 (head_dim // 2,): 1 for the fast pairs, `factor` for the slow ones, the smoothed divisor between."""
    factor, low, high, old_context = (params[key] for key in LLAMA3_KEYS)
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    # the converter's loop works on 0-d float32 tensors; these are the same elementwise operations on the vector
    wavelen = 2 * math.pi / freqs
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = 1 / ((1 - smooth) / factor + smooth)
    slow = torch.full_like(freqs, factor)  # a Python float stored in float32, as torch.tensor(list) stores it
    factors = torch.where(wavelen > old_context / low, slow, smoothed)
    return torch.where(wavelen < old_context / high, torch.ones_like(freqs), factors)
