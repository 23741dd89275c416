"""The engine pair (support/engine_pair.py) with Llama-3.1's RoPE scaling (`rope_type: llama3`) in both configs, for
`convert --to gguf` with a rope_freqs tensor (layouts/gguf_rope.py).

The scaling is made to matter inside a few dozen positions: with an original context of 32 (and head_dim 32, theta
1e4) the fastest rotary pair is kept, the next two are smoothed and the other 13 rotate `factor` times slower than
plain RoPE: the rope_freqs tensor holds all three kinds of divisor. And the head's
attention is made to matter: the engine pair's head adds nothing through attention (o_proj = 0); here o_proj is
random (`attention`), so what the head proposes depends on its attention scores, which depend on its RoPE. The
target keeps o_proj = 0 everywhere, so its greedy continuation stays t -> t+1 whatever its RoPE."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from support.engine_pair import HIDDEN, build_engine_pair

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}


def with_rope_scaling(folder: Path, scaling: dict | None) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"rope_scaling": scaling}, indent=2))


def build_llama3_pair(root: Path, *, attention: float = 0.0, seed: int = 0) -> dict[str, Path]:
    """build_engine_pair's files, both configs stating LLAMA3, the head's o_proj random times `attention` (0: the
    engine pair's head, whose drafts do not depend on its RoPE)."""
    paths = build_engine_pair(root, seed=seed)
    for role in ("target", "eagle3"):
        with_rope_scaling(paths[role], LLAMA3)
    if attention:
        weights = paths["eagle3"] / "model.safetensors"
        tensors = load_file(weights)
        g = torch.Generator().manual_seed(seed + 1)
        tensors["midlayer.self_attn.o_proj.weight"] = torch.randn(HIDDEN, HIDDEN, generator=g) * attention
        save_file(tensors, weights, metadata={"format": "pt"})
    return paths
