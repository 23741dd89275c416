#!/usr/bin/env python3
"""Write tests/golden/dflash-qwen3/: a tiny Llama target, a random 2-layer DFlash draft (z-lab layout), a few
contexts, and what tests/support/dflash_reference.py computes for them (fp32): the tapped target states, the block
logits at the mask positions and the greedy proposals, non-causal (DFlash) and causal (JetSpec).

  PYTHONPATH=src .venv/bin/python scripts/dev/make_dflash_golden.py [OUT]   (default tests/golden/dflash-qwen3)
  ... --verify   recompute into a temporary folder and compare with OUT byte for byte

Deterministic: seeded weights (eagle_convert.testing.dflash), fixed contexts, fp32 on CPU."""

from __future__ import annotations

import argparse
import filecmp
import json
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.dflash_reference import dflash_step, target_taps  # noqa: E402

from eagle_convert.testing.dflash import build_dflash_set, read_dflash  # noqa: E402
from eagle_convert.testing.tiny import TinyConfig  # noqa: E402

# Small enough to keep the set under 1 MB; head_dim 16; 3 layers so that the ids [0, 1] skip the last one.
CONFIG = TinyConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=96, vocab_size=128)
LAYER_IDS = [0, 1]
CONTEXTS = [[1, 17, 42, 99, 5], [1, 100, 3, 77, 64, 31, 8, 8, 120], [1, 9]]
FILES = ["target/config.json", "target/model.safetensors", "draft/config.json", "draft/model.safetensors",
         "inputs.safetensors", "expected.safetensors", "manifest.json"]


def write(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        made = build_dflash_set(Path(tmp), cfg=CONFIG, target_layer_ids=LAYER_IDS)
        out.mkdir(parents=True, exist_ok=True)
        for src, dst in ((made["target"], out / "target"), (made["zlab"], out / "draft")):
            dst.mkdir(exist_ok=True)
            for f in ("config.json", "model.safetensors"):
                (dst / f).write_bytes((src / f).read_bytes())
    info = read_dflash(out / "draft")
    head = load_file(out / "draft" / "model.safetensors")
    inputs, expected, manifest = {}, {}, {"contexts": [], "block_size": info["block_size"],
                                          "mask_token_id": info["mask_token_id"],
                                          "target_layer_ids": info["target_layer_ids"]}
    for n, ids in enumerate(CONTEXTS):
        t = target_taps(out / "target", ids, info["target_layer_ids"])
        bonus = int(t["greedy"][-1])  # the target's own next token, as the engines' bonus
        inputs[f"context{n}"] = torch.tensor(ids, dtype=torch.int64)
        inputs[f"bonus{n}"] = torch.tensor([bonus], dtype=torch.int64)
        expected[f"taps{n}"] = t["taps"].contiguous()
        for causal in (False, True):
            tag = "causal" if causal else "noncausal"
            r = dflash_step(head, info["config"], t["taps"], bonus, embed=t["embed"], lm_head=t["lm_head"],
                            mask_token_id=info["mask_token_id"], block_size=info["block_size"], causal=causal)
            expected[f"logits{n}_{tag}"] = r["logits"].contiguous()
            expected[f"proposals{n}_{tag}"] = r["proposals"].to(torch.int64)
            top2 = r["logits"].topk(2, dim=-1).values
            manifest.setdefault("min_top2_gap", 1e9)
            manifest["min_top2_gap"] = round(min(manifest["min_top2_gap"], float((top2[:, 0] - top2[:, 1]).min())), 6)
        manifest["contexts"].append({"ids": ids, "bonus": bonus})
    save_file(inputs, out / "inputs.safetensors", metadata={"format": "pt"})
    save_file(expected, out / "expected.safetensors", metadata={"format": "pt"})
    manifest["keys"] = {k: list(v.shape) for k, v in sorted(expected.items())}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(ROOT / "tests" / "golden" / "dflash-qwen3"))
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    if not args.verify:
        write(out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp))
        bad = [f for f in FILES if not filecmp.cmp(Path(tmp) / f, out / f, shallow=False)]
    print("identical" if not bad else f"differ: {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
