"""The deliberate mistakes of the gate tests (tests/benchmark/test_gates.py) and of
scripts/bench/measure_gate_tolerance.py: edits to a correct conversion of the tiny release pair
(eagle_convert.testing.vllm_pairs.build_releases) that the reference gate must catch, and the correct conversions it
must pass."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def edit_tensors(folder: Path, change) -> None:
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors")


def edit_config(folder: Path, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


def permute_lm_head(t):
    t["lm_head.weight"] = t["lm_head.weight"][torch.randperm(t["lm_head.weight"].shape[0],
                                                              generator=torch.Generator().manual_seed(0))]


def perturb_lm_head(t):  # 5 % noise: the kind of damage a wrong dtype round trip or a bad splice does
    w = t["lm_head.weight"]
    t["lm_head.weight"] = w + 0.05 * w.std() * torch.randn(w.shape, generator=torch.Generator().manual_seed(1))


def swap_fc_halves(t):
    h = t["fc.weight"].shape[0]
    t["fc.weight"] = torch.cat([t["fc.weight"][:, h:], t["fc.weight"][:, :h]], dim=1).contiguous()


def zero_d2t(t):
    t["d2t"] = torch.zeros_like(t["d2t"])


def shift_aux_layers(config):
    # Both places the output states them (top level and eagle_config): shifting one only is a read error by itself.
    config["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in config["eagle_aux_hidden_state_layer_ids"]]
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = config["eagle_aux_hidden_state_layer_ids"]


def flip_norm_before_residual(config):
    config["norm_before_residual"] = not config["norm_before_residual"]


CORRECT = [("eagle1", "vllm-v0", {}), ("eagle1", "vllm", {"fc_bias": "fold"}), ("eagle1", "sglang", {}),
           ("eagle3", "vllm", {}), ("eagle3", "speculators", {}), ("eagle3", "sglang", {})]

# (name, head, layout, convert options, tensor edit, config edit)
MISTAKES = [
    ("lm head permuted", "eagle1", "vllm-v0", {}, permute_lm_head, None),
    ("lm head perturbed", "eagle1", "vllm-v0", {}, perturb_lm_head, None),
    ("fc halves swapped", "eagle1", "vllm-v0", {}, swap_fc_halves, None),
    ("fc bias dropped", "eagle1", "vllm", {"fc_bias": "drop"}, None, None),
    ("d2t zeroed", "eagle3", "vllm", {}, zero_d2t, None),
    ("aux layers shifted by one", "eagle3", "vllm", {}, None, shift_aux_layers),
    ("norm_before_residual flipped", "eagle3", "vllm", {}, None, flip_norm_before_residual),
]
