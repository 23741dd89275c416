"""Real SGLang 0.5.23 loads a DFlash head as `convert --to dflash` writes it (`sglang` marker, `make test-sglang`):
SGLang's ModelConfig with `speculative_algorithm="DFLASH"`, its ModelRegistry picks `DFlashDraftModel`
(models/dflash.py), its loader fills every NaN-filled parameter, each equal to the tensor it comes from
(scripts/engines/sglang_load_check.py). SGLang reads `dflash_config.target_layer_ids` as layer OUTPUTS and captures
the inputs of those + 1 (set_dflash_layers_to_capture): a speculators head (inputs [1, 3]) must come out captured at
[1, 3]. Negative controls: a z-lab config holding the speculators numbers untranslated is captured one layer deeper,
and a missing tensor is caught (SGLang's load_weights itself skips unknown names and leaves the parameter unset)."""

from __future__ import annotations

import json
import subprocess

import pytest
from safetensors.torch import load_file, save_file
from test_sglang import ROOT, SGLANG_PYTHON

import eagle_convert
from eagle_convert.testing.dflash import build_dflash_set

pytestmark = pytest.mark.sglang
SCRIPT = ROOT / "scripts" / "engines" / "sglang_load_check.py"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    from pathlib import Path

    if not Path(SGLANG_PYTHON).is_file():
        pytest.skip(f"no SGLang interpreter at {SGLANG_PYTHON} (run `make test-sglang`)")
    root = tmp_path_factory.mktemp("sglang-dflash")
    paths = build_dflash_set(root / "set", layers=2)
    outs = {}
    for name in ("speculators", "zlab-qwen3"):
        outs[name] = root / f"out-{name}"
        eagle_convert.convert(str(paths[name]), str(paths["target"]), outs[name], to="dflash", dtype="float32")
    untranslated = root / "untranslated"  # the speculators input numbers copied into z-lab's output-count key
    _copy(outs["speculators"], untranslated)
    cfg = json.loads((untranslated / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = json.loads((paths["speculators"] / "config.json").read_text())[
        "aux_hidden_state_layer_ids"]
    (untranslated / "config.json").write_text(json.dumps(cfg))
    missing = root / "missing"
    _copy(outs["speculators"], missing)
    tensors = load_file(missing / "model.safetensors")
    del tensors["layers.1.self_attn.k_norm.weight"]
    save_file(tensors, missing / "model.safetensors")
    dirs = [outs["speculators"], outs["zlab-qwen3"], untranslated, missing]
    result = subprocess.run([SGLANG_PYTHON, str(SCRIPT), *map(str, dirs)], capture_output=True, text=True,
                            timeout=900)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {r["dir"]: r for r in lines} | {"names": dict(zip(("speculators", "zlab-qwen3", "untranslated",
                                                               "missing"), map(str, dirs)))}


def _copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())


def _result(checked, name):
    return checked[checked["names"][name]]


@pytest.mark.parametrize("name", ["speculators", "zlab-qwen3"])
def test_sglang_fills_every_parameter_of_our_dflash_output(checked, name):
    r = _result(checked, name)
    assert r["class"] == "sglang.srt.models.dflash.DFlashDraftModel" and r["problems"] == []
    assert r["checked"] == 2 * 8 + 3 and r["not_from_checkpoint"] == {}  # per layer: qkv, o, gate_up, down, 4 norms
    view = r["sglang_view"]
    assert view == {"target_layer_ids": [0, 2], "layers_to_capture": [1, 3], "block_size": 4, "mask_token_id": 255,
                    "fc_input": 256}


def test_negative_control_untranslated_ids_are_captured_one_layer_deeper(checked):
    assert _result(checked, "untranslated")["sglang_view"]["layers_to_capture"] == [2, 4]


def test_negative_control_a_missing_tensor_is_caught(checked):
    problems = _result(checked, "missing")["problems"]
    assert problems == ["SGLang parameter layers.1.self_attn.k_norm.weight (32,) was not loaded from the checkpoint"]
