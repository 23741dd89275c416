"""convert --mtp --to sglang (issue 25): the NextN layout SGLang's scripts/export_deepseek_nextn.py writes (golden
names, config and index), reading none of the embedding / head copies it drops; --dequantize turns block FP8 into
BF16 exactly (against an independent per-block reference, with partial 128-blocks)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from eagle_convert.api import MtpSettings, extract_mtp
from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target

# The NextN layer of the DeepSeek-V3 fixture (layer 2 of a 2-layer trunk, q_lora_rank set, 4 routed experts and one
# shared expert), as export_deepseek_nextn.py names it: renumbered to 0, embed_tokens / shared_head.head dropped.
GOLDEN_DEEPSEEK = sorted(
    ["eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight", "input_layernorm.weight",
     "post_attention_layernorm.weight", "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight",
     "self_attn.q_b_proj.weight", "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
     "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight", "mlp.gate.weight", "mlp.gate.e_score_correction_bias"]
    + [f"mlp.experts.{e}.{p}_proj.weight" for e in range(4) for p in ("gate", "up", "down")]
    + [f"mlp.shared_experts.{p}_proj.weight" for p in ("gate", "up", "down")])
NEXTN = "nextn_layer_parameters.safetensors"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang")
    return {"deepseek": build_mtp_target(root / "ds", MtpFixture("deepseek_v3")),
            "fp8": build_mtp_target(root / "fp8", MtpFixture("deepseek_v3", fp8=True)),
            "glm": build_mtp_target(root / "glm", MtpFixture("glm4_moe"))}


def sglang(target, out, dequantize=False):
    return extract_mtp(str(target.path), out, MtpSettings(to="sglang", dequantize=dequantize))


@pytest.mark.parametrize("name, arch", [("deepseek", "DeepseekV3ForCausalLMNextN"), ("glm", "Glm4MoeForCausalLMNextN")])
def test_the_nextn_layout_has_the_export_scripts_names_config_and_index(name, arch, built, tmp_path):
    target = built[name]
    result = sglang(target, tmp_path / "out")
    out = tmp_path / "out"
    written = load_file(out / NEXTN)
    source = load_file(target.path / target.mtp_file)
    if name == "deepseek":
        assert sorted(written) == sorted("model.layers.0." + n for n in GOLDEN_DEEPSEEK)
    for new, value in written.items():
        assert torch.equal(value, source[new.replace("model.layers.0.", "model.layers.2.", 1)])
    assert not any("embed_tokens" in n or "shared_head.head" in n for n in written)
    # the dropped copies: never read
    assert result.to_dict()["bytes_to_read"] == sum(t.nbytes for t in written.values())
    config, original = json.loads((out / "config.json").read_text()), target.config
    assert config["architectures"] == [arch] and config["num_hidden_layers"] == 1
    assert {k: v for k, v in config.items() if k not in ("architectures", "num_hidden_layers")} == \
        {k: v for k, v in original.items() if k not in ("architectures", "num_hidden_layers")}
    assert json.loads((out / "model.safetensors.index.json").read_text()) == {"weight_map": dict.fromkeys(
        sorted(written), NEXTN)}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.json", "eagle_convert.json", "generation_config.json", "model.safetensors.index.json", NEXTN])
    assert "--speculative-draft-model-path" in result.plan.serve_command


def reference_dequant(codes: torch.Tensor, scale: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Block by block, in float64 (the FP8 x fp32 product is exact there), rounded once to bf16."""
    out = torch.empty(codes.shape, dtype=torch.bfloat16)
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            rows, cols = slice(i * block, (i + 1) * block), slice(j * block, (j + 1) * block)
            out[rows, cols] = (codes[rows, cols].double() * scale[i, j].double()).to(torch.bfloat16)
    return out


def deepseek_kernel(codes: torch.Tensor, scale: torch.Tensor, block: int = 128) -> torch.Tensor:
    """DeepSeek-V3's inference/kernel.py weight_dequant: y = x * s in float32, then the default dtype (bf16)."""
    rows, cols = codes.shape
    s = scale.repeat_interleave(block, 0)[:rows].repeat_interleave(block, 1)[:, :cols]
    return (codes.float() * s).to(torch.bfloat16)


def test_dequantize_writes_bf16_equal_to_a_per_block_reference(built, tmp_path):
    target = built["fp8"]
    result = sglang(target, tmp_path / "out", dequantize=True)
    written = load_file(tmp_path / "out" / NEXTN)
    source = load_file(target.path / target.mtp_file)
    quantized = [n for n, t in source.items() if t.dtype == torch.float8_e4m3fn]
    assert len(quantized) == 20 and not any(n.endswith("_scale_inv") for n in written)
    partial = source["model.layers.2.self_attn.kv_a_proj_with_mqa.weight"]
    assert partial.shape[0] % 128 != 0  # 576 rows: the last row block is partial
    for name in quantized:
        new = name.replace("model.layers.2.", "model.layers.0.", 1)
        reference = reference_dequant(source[name], source[name + "_scale_inv"])
        assert written[new].dtype == torch.bfloat16 and torch.equal(written[new], reference), name
        assert torch.equal(written[new], deepseek_kernel(source[name], source[name + "_scale_inv"])), name
    # Negative control: a wrong scale (another block's) gives different values, so the equality can fail.
    name = "model.layers.2.self_attn.kv_a_proj_with_mqa.weight"
    wrong = reference_dequant(source[name], source[name + "_scale_inv"].flip(0))
    assert not torch.equal(written[name.replace("layers.2", "layers.0")], wrong)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "quantization_config" not in config and config["torch_dtype"] == "bfloat16"
    assert "--speculative-draft-model-quantization unquant" in result.plan.serve_command
    prov = json.loads((tmp_path / "out" / "eagle_convert.json").read_text())
    entry = prov["tensors"][name.replace("layers.2", "layers.0")]
    assert [s["name"] for s in entry["sources"]] == [name, name + "_scale_inv"]  # both ranges recorded
    assert entry["how"].startswith("dequantize fp8")


def test_without_dequantize_the_fp8_layer_passes_through(built, tmp_path):
    sglang(built["fp8"], tmp_path / "out")
    written = load_file(tmp_path / "out" / NEXTN)
    assert written["model.layers.0.self_attn.o_proj.weight"].dtype == torch.float8_e4m3fn
    assert "model.layers.0.self_attn.o_proj.weight_scale_inv" in written
    assert "quantization_config" in json.loads((tmp_path / "out" / "config.json").read_text())
