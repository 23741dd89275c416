"""Load an MTP (NextN) draft through SGLang 0.5.23's own loader and check that every parameter was loaded.

Run with the SGLang environment's python (`make sglang-env`):
`python scripts/engines/sglang_mtp_load_check.py DIR [DIR ...]`.
For each DIR (a `convert --mtp TARGET --to sglang` output: one layer renumbered to 0, `num_hidden_layers: 1`, the
`...ForCausalLMNextN` architecture), SGLang's ModelConfig reads config.json as a draft's, its ModelRegistry picks the
NextN class, the model is built at TP=1 over gloo, every parameter is filled with NaN, and SGLang's safetensors
iterator + `load_weights` + `post_load_weights` fill them. Then: no parameter may keep a NaN, except those SGLang's
server takes from the target (the embedding and the LM head: "Use shared head and embed weights from target model");
every parameter SGLang keeps under the checkpoint's own name (`model.layers.0.X` -> `model.X` for the NextN tensors,
`model.decoder.X` for the block) must equal the tensor; the fused ones (q_a + kv_a, gate + up, experts) are checked
by being filled. Prints one JSON line per DIR: {"dir", "architecture", "class", "checked", "filled", "problems",
"not_from_checkpoint"}. Exit 0 when no DIR has a problem, 1 otherwise."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("SGLANG_ENABLE_TORCH_COMPILE", "0")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from sglang_load_check import run_checks  # noqa: E402  (this folder is on sys.path when run as a script)

NEXTN_OWN = ("eh_proj.", "enorm.", "hnorm.", "shared_head.norm.")
FROM_TARGET = {"model.embed_tokens.weight": "the server shares the target's embedding (deepseek_nextn.py / "
                                            "glm4_moe_nextn.py: set_embed_and_head)",
               "lm_head.weight": "the server shares the target's LM head (set_embed_and_head)"}


def sglang_name(name: str) -> str:
    """Where SGLang's NextN loader puts a checkpoint tensor it keeps under its own name."""
    rest = name.removeprefix("model.layers.0.")
    return "model." + rest if rest.startswith(NEXTN_OWN) else "model.decoder." + rest


def check(folder: Path) -> dict:
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.loader import DefaultModelLoader, _initialize_model

    config = json.loads((folder / "config.json").read_text())
    mc = ModelConfig(model_path=str(folder), is_draft_model=True, dtype="float32", speculative_algorithm="EAGLE")
    load_config = LoadConfig(load_format="auto")
    with torch.device("cpu"):
        model = _initialize_model(mc, load_config)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for p in params.values():
            if p.is_floating_point():
                p.fill_(float("nan"))
    loader = DefaultModelLoader(load_config)
    DefaultModelLoader.load_weights_and_postprocess(model, loader._get_all_weights(mc, model), torch.device("cpu"))

    ckpt = {}
    for file in sorted(folder.glob("*.safetensors")):
        ckpt.update(load_file(file))
    problems, checked, filled = [], 0, 0
    allowed = {name: why for name, why in FROM_TARGET.items() if name in params}
    for name, p in params.items():
        if name in allowed:
            continue
        if p.is_floating_point() and torch.isnan(p.detach()).any():
            problems.append(f"SGLang parameter {name} {tuple(p.shape)} was not (fully) loaded from the checkpoint")
        else:
            filled += 1
    for name, tensor in ckpt.items():
        target = sglang_name(name)
        if target in params and tuple(params[target].shape) == tuple(tensor.shape):
            if torch.equal(params[target].detach(), tensor.to(params[target].dtype)):
                checked += 1
            else:
                problems.append(f"{target}: SGLang's parameter differs from the checkpoint tensor {name}")
    return {"dir": str(folder), "architecture": config["architectures"][0],
            "class": f"{type(model).__module__}.{type(model).__name__}", "checked": checked, "filled": filled,
            "params": len(params), "problems": problems, "not_from_checkpoint": allowed}


def main() -> int:
    return run_checks(check)


if __name__ == "__main__":
    sys.exit(main())
