"""A tiny target with EAGLE-1 and EAGLE-3 heads in the *released* layouts (SafeAILab EAGLE-1 `.bin` with an fc bias
and `"bias": true`; EAGLE-3 `midlayer.*`), built from scripts/make_tiny_vllm_pair.py's structured weights, which give
partial acceptance (so a broken conversion has something to lose). Shared by the real-vLLM tests and the gate tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [[1, 17, 42, 99, 5], [1, 200, 3, 77], [1, 9, 9, 120, 64, 31]]


def build_releases(root: Path, *, successor: float = 1.4) -> dict[str, Path]:
    """Write pair/ (the script's layouts), eagle1-release/, eagle3-release/ and prompts.jsonl (token ids) under root."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from make_tiny_vllm_pair import build_pair
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    paths = build_pair(root / "pair", successor=successor)
    pair = root / "pair"
    # EAGLE-1 as SafeAILab releases it: fp32 pickle, an fc bias, config "bias": true, 2048 positions.
    e1 = load_file(pair / "eagle1" / "model.safetensors")
    e1["fc.bias"] = torch.randn(e1["fc.weight"].shape[0], generator=torch.Generator().manual_seed(3)) * 0.05
    cfg1 = json.loads((pair / "eagle1" / "config.json").read_text())
    cfg1.update(bias=True, max_position_embeddings=2048)
    (root / "eagle1-release").mkdir()
    torch.save(e1, root / "eagle1-release" / "pytorch_model.bin")
    (root / "eagle1-release" / "config.json").write_text(json.dumps(cfg1))
    # EAGLE-3 as SafeAILab/SpecForge release it: midlayer.*, LlamaForCausalLMEagle3.
    e3 = {k.replace("layers.0.", "midlayer."): v for k, v in load_file(pair / "eagle3" / "model.safetensors").items()}
    cfg3 = json.loads((pair / "eagle3" / "config.json").read_text())
    for key in ("norm_before_residual", "target_hidden_size"):
        cfg3.pop(key, None)
    cfg3["architectures"] = ["LlamaForCausalLMEagle3"]
    (root / "eagle3-release").mkdir()
    save_file(e3, root / "eagle3-release" / "model.safetensors")
    (root / "eagle3-release" / "config.json").write_text(json.dumps(cfg3))
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt_ids": ids}) + "\n" for i, ids in enumerate(PROMPTS)))
    return {"root": root, "target": Path(paths["target"]), "eagle1": root / "eagle1-release",
            "eagle3": root / "eagle3-release", "prompts": prompts}
