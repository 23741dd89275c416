"""MTP targets for the bench tests, built on eagle_convert.testing.mtp_targets: the MiMo target with weights that give
*partial* acceptance (so counters compare something), extraction through the CLI, and a corrupted extraction."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from eagle_convert.testing.mtp_targets import HIDDEN, MtpFixture, build_mtp_target

PROMPTS = [[5, 17, 33, 60, 61, 62], [100, 3, 200, 201], [9, 9, 9, 40, 80, 120, 121, 122, 7]]
# Keys DeepSeek-V3's released config.json has and transformers' DeepseekV3Config does not write. Both engines read
# topk_method: without "noaux_tc" vLLM builds no e_score_correction_bias (its load then fails on the release's) and
# SGLang's MoE gate raises.
DEEPSEEK_RELEASE_KEYS = {"topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1}


def engine_fixture(family: str, **options) -> MtpFixture:
    """The family's fixture with the config keys its release has and the engines read."""
    extra = DEEPSEEK_RELEASE_KEYS if family == "deepseek_v3" else {}
    return MtpFixture(family, config_extra=extra, **options)


def _edit_shards(folder: Path, change) -> None:
    for file in sorted(folder.glob("*.safetensors")):
        tensors = load_file(file)
        change(tensors)
        save_file({k: t.contiguous() for k, t in tensors.items()}, file, metadata={"format": "pt"})


def partial_mimo(folder: Path, *, noise: float = 3.0, attention: float = 6.0, seed: int = 0) -> Path:
    """A MiMo target whose greedy continuation is mostly t -> t+1 (lm_head = the embedding rolled by one) and whose
    MTP layer mostly predicts the token after that (input_proj passes the embedding half through), with seeded noise
    in input_proj so that some drafts are rejected. The final norm's weight is far from one, so a runner feeding the
    post-norm hidden state instead of the pre-norm one drafts differently."""
    build_mtp_target(folder, MtpFixture("mimo", seed=seed))
    gen = torch.Generator().manual_seed(seed + 7)
    embed = torch.randn(256, HIDDEN, generator=gen)

    def change(t: dict[str, torch.Tensor]) -> None:
        if "model.embed_tokens.weight" in t:
            t["model.embed_tokens.weight"] = embed.clone()
        if "lm_head.weight" in t:
            t["lm_head.weight"] = torch.roll(embed, 1, dims=0) / math.sqrt(HIDDEN)
        if "model.norm.weight" in t:
            t["model.norm.weight"] = 1 + torch.randn(HIDDEN, generator=gen) * 0.5
        name = "model.mtp_layers.0.input_proj.weight"
        if name in t:
            proj = torch.randn(HIDDEN, 2 * HIDDEN, generator=gen) * noise / math.sqrt(2 * HIDDEN)
            proj[:, HIDDEN:] += torch.eye(HIDDEN)  # MiMo fuses [hidden, emb]: the embedding half
            t[name] = proj
        o_proj = "model.mtp_layers.0.self_attn.o_proj.weight"
        if o_proj in t:  # attention that matters: the layer's own KV cache (position 0's row included) shows
            t[o_proj] = t[o_proj] * attention

    _edit_shards(folder, change)
    return folder


def extract(target: Path, out: Path) -> Path:
    """`eagle-convert convert --mtp TARGET -o OUT --to vllm`, as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "eagle_convert", "convert", "--mtp", str(target), "-o", str(out),
                           "--to", "vllm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def corrupt(folder: Path, name: str, *, seed: int = 3) -> Path:
    """An extraction with `name` (the fusion projection) replaced by seeded noise of the same shape: a layer that
    loads and runs, but predicts nothing."""
    def change(t: dict[str, torch.Tensor]) -> None:
        if name in t:
            t[name] = torch.randn(t[name].shape, generator=torch.Generator().manual_seed(seed)).to(t[name].dtype)

    _edit_shards(folder, change)
    return folder
