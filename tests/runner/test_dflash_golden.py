"""The DFlash reference forward (tests/support/dflash_reference.py) against its stored golden set
(tests/golden/dflash-qwen3, made by scripts/dev/make_dflash_golden.py): taps from the target, block logits and
proposals, non-causal and causal, at fp32 1e-5, with negative controls that must move the numbers."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from support.dflash_reference import dflash_step, target_taps
from support.golden_sets import GOLDEN

from eagle_convert.testing.dflash import read_dflash, speculators_config
from eagle_convert.testing.tiny import TinyConfig

SET = GOLDEN / "dflash-qwen3"
TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(scope="module")
def golden():
    for f in ("manifest.json", "inputs.safetensors", "expected.safetensors", "draft/model.safetensors",
              "target/model.safetensors"):
        assert (SET / f).is_file(), f"{SET / f} is missing: run scripts/dev/make_dflash_golden.py"
    info = read_dflash(SET / "draft")
    return {"info": info, "head": load_file(SET / "draft" / "model.safetensors"),
            "inputs": load_file(SET / "inputs.safetensors"), "expected": load_file(SET / "expected.safetensors"),
            "manifest": json.loads((SET / "manifest.json").read_text()),
            "taps": [target_taps(SET / "target", c["ids"], info["target_layer_ids"])
                     for c in json.loads((SET / "manifest.json").read_text())["contexts"]]}


def _step(g, n, *, causal, taps=None, head=None, config=None):
    t = g["taps"][n]
    info = g["info"]
    return dflash_step(head or g["head"], config or info["config"], t["taps"] if taps is None else taps,
                       int(g["inputs"][f"bonus{n}"]), embed=t["embed"], lm_head=t["lm_head"],
                       mask_token_id=info["mask_token_id"], block_size=info["block_size"], causal=causal)


def test_the_set_is_what_the_manifest_says(golden):
    info, m = golden["info"], golden["manifest"]
    assert (info["target_layer_ids"], info["block_size"], info["mask_token_id"], info["causal"]) == (
        m["target_layer_ids"], m["block_size"], m["mask_token_id"], False)
    assert m["min_top2_gap"] > 1e-3  # fp32 argmaxes are stable at 1e-5
    for n, c in enumerate(m["contexts"]):
        assert golden["inputs"][f"context{n}"].tolist() == c["ids"]
        assert int(golden["taps"][n]["greedy"][-1]) == c["bonus"]  # the bonus is the target's own next token


@pytest.mark.parametrize("n", [0, 1, 2])
def test_taps_are_the_outputs_of_the_listed_layers(golden, n):
    torch.testing.assert_close(golden["taps"][n]["taps"], golden["expected"][f"taps{n}"], **TOL)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [0, 1, 2])
def test_reference_reproduces_the_stored_block(golden, n, causal):
    tag = "causal" if causal else "noncausal"
    r = _step(golden, n, causal=causal)
    torch.testing.assert_close(r["logits"], golden["expected"][f"logits{n}_{tag}"], **TOL)
    assert r["proposals"].tolist() == golden["expected"][f"proposals{n}_{tag}"].tolist()


def test_taps_one_layer_off_change_the_block(golden):
    # negative control: target_layer_ids + 1 (the input convention read as the output one) must not pass
    ids = [i + 1 for i in golden["info"]["target_layer_ids"]]
    for n, c in enumerate(golden["manifest"]["contexts"]):
        shifted = target_taps(SET / "target", c["ids"], ids)["taps"]
        moved = _step(golden, n, causal=False, taps=shifted)["logits"] - golden["expected"][f"logits{n}_noncausal"]
        assert moved.abs().max() > 1e-2


def test_causality_and_the_drafts_rope_base_are_seen(golden):
    # negative controls: the causal mask, and the draft's own rope_theta (1e6) replaced by the target's (1e4)
    exp = golden["expected"]
    assert (exp["logits1_causal"] - exp["logits1_noncausal"]).abs().max() > 1e-2
    config = {**golden["info"]["config"], "rope_theta": 10000.0}
    assert (_step(golden, 1, causal=False, config=config)["logits"] - exp["logits1_noncausal"]).abs().max() > 1e-3


def test_speculators_layout_translates_to_the_same_taps(golden):
    cfg = TinyConfig(**{k: golden["info"]["config"][k] for k in ("hidden_size", "num_attention_heads",
                                                                  "intermediate_size", "vocab_size")},
                     num_hidden_layers=3)
    ids = golden["info"]["target_layer_ids"]
    spec = speculators_config(cfg, layers=2, target_layer_ids=ids, verifier="target")
    assert spec["aux_hidden_state_layer_ids"] == [i + 1 for i in ids]  # the input convention
    assert spec["sliding_window_non_causal"] is True  # vLLM: causal = not this
