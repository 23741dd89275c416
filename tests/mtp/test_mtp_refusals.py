"""convert --mtp refuses by name (issue 25): each broken target exits 1 with one paragraph that names the problem,
and writes nothing (no OUT, no staging folder left beside it)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from eagle_convert.cli.main import main
from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target

MIMO_Q = "model.mtp_layers.0.self_attn.q_proj.weight"
DS = "model.layers.2."
SCALE = DS + "self_attn.kv_a_proj_with_mqa.weight_scale_inv"
MINIMAX = {"model_type": "minimax_m2", "architectures": ["MiniMaxM2ForCausalLM"], "use_mtp": True,
           "num_mtp_modules": 3, "num_nextn_predict_layers": None}


def _t(*shape):
    return torch.zeros(*shape)


# case: (fixture, extra CLI args, words the one paragraph must hold)
CASES = {
    "missing q_proj (vLLM would load it silently)": (
        MtpFixture("mimo", drop=(MIMO_Q,)), [], ["incomplete", MIMO_Q]),
    "missing one expert's projection": (
        MtpFixture("deepseek_v3", drop=(DS + "mlp.experts.3.down_proj.weight",)), [],
        ["incomplete", "mlp.experts.3.down_proj.weight"]),
    "missing the fusion projection": (
        MtpFixture("qwen3_next", drop=("mtp.fc.weight",)), [], ["mtp.fc.weight"]),
    "FP8 weight without its scale": (
        MtpFixture("deepseek_v3", fp8=True, drop=(SCALE,)), [], ["FP8", SCALE.removesuffix("_scale_inv")]),
    "FP8 scale of the wrong block shape": (
        MtpFixture("deepseek_v3", fp8=True, extra={SCALE: _t(2, 2)}), [], [SCALE, "[5, 1]"]),
    "config promises MTP layers, no tensor holds them": (
        MtpFixture("glm4_moe", write_mtp=False), [], ["promises 1 MTP layer", "num_nextn_predict_layers"]),
    "MiniMax-M2 style config": (
        MtpFixture("glm4_moe", write_mtp=False, config_extra=MINIMAX), [], ["num_mtp_modules: 3", "no tensor"]),
    "num_nextn_predict_layers: 0": (
        MtpFixture("mimo", config_extra={"num_nextn_predict_layers": 0}), [], ["num_nextn_predict_layers: 0"]),
    "DSpark by model_type": (
        MtpFixture("deepseek_v3", config_extra={"model_type": "deepseek_v41"}), [], ["DSpark", "deepseek_v41"]),
    "DSpark by tensor names": (
        MtpFixture("deepseek_v3", extra={"mtp.0.main_proj.weight": _t(4, 4), "mtp.0.markov_head.embed.weight":
                                         _t(4, 4), "mtp.0.confidence_head.weight": _t(1, 4)}), [],
        ["DSpark", "mtp.0.main_proj.weight"]),
    "a fusion projection of other sizes": (
        MtpFixture("glm4_moe", extra={DS + "eh_proj.weight": _t(128, 128)}), [],
        ["hidden_size 128", DS + "eh_proj.weight is [128, 128], not [128, 256]"]),
    "a look-alike tensor under the prefix": (
        MtpFixture("glm4_moe", extra={DS + "mlp.router_proj.weight": _t(4, 4)}), [],
        ["does not have", DS + "mlp.router_proj.weight"]),
    "sglang layout with 2 layers": (
        MtpFixture("deepseek_v3", layers=2, extra={}), ["--to", "sglang"], ["exactly one NextN layer", "2"]),
    "sglang layout for a family without NextN": (MtpFixture("mimo"), ["--to", "sglang"], ["sglang layout", "MiMo"]),
    "packed quantization format": (
        MtpFixture("glm4_moe", config_extra={"quantization_config": {"quant_method": "gptq", "bits": 4}}), [],
        ["quant_method 'gptq'"]),
    "dequantize for the vllm layout of an FP8 target": (
        MtpFixture("deepseek_v3", fp8=True), ["--dequantize"], ["--dequantize", "target's own quantization"]),
    "dequantize of an unquantized layer": (
        MtpFixture("deepseek_v3"), ["--to", "sglang", "--dequantize"], ["nothing to dequantize"]),
    "not an MTP family": (
        MtpFixture("mimo", config_extra={"architectures": ["Qwen2ForCausalLM"], "num_nextn_predict_layers": None}),
        [], ["not a known MTP family"]),
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    root = tmp_path_factory.mktemp("broken")
    return {case: build_mtp_target(root / str(i), fixture).path for i, (case, (fixture, _, _)) in
            enumerate(CASES.items())}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("case", CASES)
def test_each_broken_target_is_refused_by_name_and_nothing_is_written(case, broken, tmp_path):
    _, args, words = CASES[case]
    out = tmp_path / "out"
    result = run("convert", "--mtp", broken[case], "-o", out, *args)
    assert result.exit_code == 1, result.output
    err = result.stderr
    assert err.startswith("error: ") and "\n\n" not in err.strip() and "Traceback" not in err
    flat = " ".join(err.split())
    assert all(" ".join(w.split()) in flat for w in words), flat
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no output, no staging folder


def test_the_layers_two_fixture_itself_extracts_to_vllm(broken, tmp_path):
    """Control for the sglang refusal: the same two-layer target is fine for the vllm layout (every layer kept)."""
    result = run("convert", "--mtp", broken["sglang layout with 2 layers"], "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.parametrize("args", [["DRAFT"], ["-t", "T"], ["--fc-bias", "fold"], ["--dtype", "bfloat16"]])
def test_mtp_refuses_eagle_options_beside_it(args, broken, tmp_path):
    result = run("convert", "--mtp", broken["sglang layout for a family without NextN"], "-o", tmp_path / "o", *args)
    assert result.exit_code == 2 and "cannot be used with --mtp" in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()


def test_dequantize_without_mtp_and_a_missing_draft_are_usage_errors(tmp_path):
    assert run("convert", "-o", tmp_path / "o", "-t", "x").exit_code == 2
    assert "Missing argument 'DRAFT'" in run("convert", "-o", tmp_path / "o", "-t", "x").output
    assert "Missing option '-t' / '--target'" in run("convert", "d", "-o", tmp_path / "o").output
    assert "--dequantize applies only with --mtp" in run("convert", "d", "-t", "x", "-o", tmp_path / "o",
                                                         "--dequantize").output
