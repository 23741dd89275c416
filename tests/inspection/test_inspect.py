"""inspect: detected layout and why, tensors, and each problem with the conversion that fixes it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.golden_sets import golden

import eagle_convert
from eagle_convert.testing.tiny import TinyConfig


def problems(report):
    return " | ".join(p.what for p in report.problems)


def test_golden_llama2_release():
    root = golden("eagle1-llama2")
    report = eagle_convert.inspect(str(root / "draft"), str(root / "target"))
    assert report.layout == "eagle1" and "bias" in report.layout_reason and report.kind == "eagle1"
    text = problems(report)
    for expected in ("No LM head", "bias=True", "fc.bias present", "max_position_embeddings is 2048", "Pickle"):
        assert expected in text, expected
    assert "mismatch" not in text
    assert {t["name"] for t in report.tensors} >= {"fc.weight", "fc.bias", "embed_tokens.weight"}
    assert all(p.fix for p in report.problems)


def test_golden_qwen2_fp32_storage_is_flagged():
    report = eagle_convert.inspect(str(golden("eagle1-qwen2") / "draft"))
    assert "Stored in float32 though the config says bfloat16" in problems(report)


def test_mismatched_target_is_flagged(pair, tmp_path):
    target, draft, _ = pair()
    cfg = json.loads((target / "config.json").read_text())
    cfg["vocab_size"] = 999
    (target / "config.json").write_text(json.dumps(cfg))
    report = eagle_convert.inspect(str(draft), str(target))
    assert "Vocab mismatch: head 256, target 999" in problems(report)


def test_converted_output_is_recognised_and_clean(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3")
    eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="speculators")
    report = eagle_convert.inspect(str(tmp_path / "out"), str(target))
    assert report.layout == "speculators" and report.kind == "eagle3"
    assert report.problems == []


def test_unknown_tensor_is_a_problem_not_a_crash(pair, tmp_path):
    target, draft, _ = pair(draft_fmt="safetensors")
    import torch
    from safetensors.torch import load_file, save_file

    t = load_file(draft / "model.safetensors")
    t["layers.0.input_layernorm.weight"] = torch.ones(64)
    save_file(t, draft / "model.safetensors")
    report = eagle_convert.inspect(str(draft))
    assert "layers.0.input_layernorm.weight" in problems(report) and report.layout is None


def test_cli_json(pair):
    target, draft, _ = pair()
    out = subprocess.run([sys.executable, "-m", "eagle_convert", "inspect", str(draft), "--target", str(target),
                          "--json"], capture_output=True, text=True)
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["layout"] == "eagle1" and data["kind"] == "eagle1"
    assert any("No LM head" in p["problem"] for p in data["problems"])


EVERY_LAYOUT = [("eagle1", True, "vllm-v0"), ("eagle1", False, "vllm-v0"), ("eagle1", False, "vllm"),
                ("eagle1", True, "sglang"), ("eagle1", False, "sglang"), ("eagle3", False, "vllm"),
                ("eagle3", False, "speculators"), ("eagle3", False, "sglang")]


@pytest.mark.parametrize("kind,fc_bias,to", EVERY_LAYOUT)
def test_a_correct_output_in_every_layout_has_no_problems(kind, fc_bias, to, pair, tmp_path):
    """What a layout keeps by design (vllm-v0's and SGLang's fc bias, SGLang's zero fc bias for a head without one,
    the target's LM head an EAGLE-1 head uses in vllm / sglang) is not a problem of the output."""
    extra = {"fc_bias": fc_bias} if kind == "eagle1" else {}
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind=kind, **extra)
    eagle_convert.convert(str(draft), str(target), tmp_path / "out", to=to)
    report = eagle_convert.inspect(str(tmp_path / "out"), str(target))
    assert report.kind == kind and report.problems == [], problems(report)


def _edit_tensors(folder, change):
    from safetensors.torch import load_file, save_file

    save_file(change(load_file(folder / "model.safetensors")), folder / "model.safetensors")


def test_what_a_layout_does_not_keep_is_still_a_problem(pair, tmp_path):
    """Negative controls: an fc bias added to a vLLM V1 EAGLE-1 head is reported (vLLM V1 has no place for it), and
    so is the LM head missing from a vllm-v0 folder (its loader needs it); no fix names the folder's own layout."""
    import torch

    target, draft, _ = pair(fc_bias=False)
    eagle_convert.convert(str(draft), str(target), tmp_path / "v1", to="vllm")
    _edit_tensors(tmp_path / "v1", lambda t: {**t, "fc.bias": torch.ones(t["fc.weight"].shape[0])})
    report = eagle_convert.inspect(str(tmp_path / "v1"), str(target))
    [problem] = [p for p in report.problems if "fc.bias present" in p.what]
    assert problem.fix == "--to vllm --fc-bias fold (exact), or keep it with --to vllm-v0 / --to sglang."

    eagle_convert.convert(str(draft), str(target), tmp_path / "v0", to="vllm-v0")
    _edit_tensors(tmp_path / "v0", lambda t: {k: v for k, v in t.items() if k != "lm_head.weight"})
    report = eagle_convert.inspect(str(tmp_path / "v0"), str(target))
    assert report.layout == "vllm-v0"
    [problem] = [p for p in report.problems if "No LM head" in p.what]
    assert "vllm-v0" not in problem.fix and "with --to vllm / --to sglang the engine uses" in problem.fix


def test_a_transformers5_dtype_key_is_read_like_torch_dtype(pair):
    """transformers 5 writes `dtype`, not `torch_dtype`: inspect reads either (the dtype line and the float32
    storage check); a config with neither still says None."""
    target, draft, _ = pair()
    cfg = json.loads((draft / "config.json").read_text())
    cfg.pop("torch_dtype", None)
    (draft / "config.json").write_text(json.dumps({**cfg, "dtype": "bfloat16"}))
    out = subprocess.run([sys.executable, "-m", "eagle_convert", "inspect", str(draft)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "torch_dtype bfloat16" in out.stdout
    assert "Stored in float32 though the config says bfloat16" in out.stdout
    (draft / "config.json").write_text(json.dumps(cfg))  # negative control: no dtype at all
    out = subprocess.run([sys.executable, "-m", "eagle_convert", "inspect", str(draft)], capture_output=True, text=True)
    assert "torch_dtype None" in out.stdout and "Stored in float32" not in out.stdout
