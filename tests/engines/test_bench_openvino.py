"""`convert --to openvino` and `bench --engine openvino --compare` in real OpenVINO GenAI 2026.4.1 (`make
test-openvino`: OPENVINO_PYTHON): the engine pair's head (support/engine_pair.py, agreeing with its target only
through taps 2, 6, 9) converted by eagle-convert, decoded by GenAI from the same token ids as our runner, fp32 greedy.
GenAI's per-round counters equal our runner's on every prompt and its output is its plain pipeline's. Negative
control: the head's ids copied into GenAI's count (what GenAI's default {2, N/2, N-3} also taps for this 12-layer
target) lose the accepted drafts, and --compare fails."""

from __future__ import annotations

import json
import shutil

import pytest
from support.engine_pair import TAPS, build_engine_pair
from support.openvino import OPENVINO_PYTHON, export

import eagle_convert
from eagle_convert.settings.bench import EngineOptions

pytestmark = pytest.mark.openvino
K, MAX_TOKENS = 3, 32
SETTINGS = dict(k=K, max_new_tokens=MAX_TOKENS, ignore_eos=True, chat_template="none", dtype="float32", compare=True)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not OPENVINO_PYTHON:
        pytest.skip("OPENVINO_PYTHON is not set (run `make test-openvino`)")
    root = tmp_path_factory.mktemp("bench-openvino")
    paths = build_engine_pair(root)
    # the target exported once for every bench here (`--engine-arg target_ir=DIR`)
    return {**paths, "target_ir": export(paths["target"], root / "target-ir")}


def bench(pair, draft, **extra):
    engine = EngineOptions(name="openvino", args=(f"target_ir={pair['target_ir']}",))
    return eagle_convert.bench(str(pair["target"]), str(draft), prompts=str(pair["prompts"]), engine=engine,
                               **SETTINGS, **extra).to_dict()


def test_convert_writes_genai_s_count_of_the_head_s_layers_into_the_ir(pair, tmp_path):
    eagle_convert.convert(str(pair["eagle3"]), str(pair["target"]), tmp_path / "ov", to="openvino", dtype="float32")
    record = json.loads((tmp_path / "ov" / "eagle_convert.json").read_text())
    # read back from the saved IR by the export worker: the inputs of 2, 6, 9 are the outputs of 1, 5, 8
    assert record["ir_export"]["rt_info"] == {"eagle3_mode": "True", "hidden_layers_list": [i - 1 for i in TAPS]}
    assert (tmp_path / "ov" / "openvino_model.xml").is_file() and not (tmp_path / "ov" / "model.safetensors").exists()


def test_genai_counts_the_same_rounds_as_our_runner_losslessly(pair):
    report = bench(pair, pair["eagle3"])
    gate = next(g for g in report["gate"]["checks"] if g["name"] == "engine_compare")
    assert gate["passed"] and gate["exact"], gate
    assert all(row["identical"] for row in report["compare"]["rows"])
    assert report["lossless"]["identical"] is True
    overall = report["overall"]["acceptance"]
    assert 0 < overall["accepted"] < overall["drafted"]  # the pair agrees in part: 0 would prove nothing
    # GenAI's own totals leave out one verify round (documented in engines/openvino_offline.py): k drafts, and that
    # round's accepted drafts
    genai = {p["id"]: p for p in report["engine"]["genai_counters"]["prompts"]}
    for prompt in report["prompts"]:
        acceptance, own = prompt["acceptance"], genai[prompt["id"]]
        assert own["num_draft_tokens"] == K * (acceptance["drafts"] - 1)
        assert 0 <= acceptance["accepted"] - own["num_accepted_tokens"] <= K


def test_negative_control_ids_copied_into_genai_s_count_lose_the_drafts_and_fail_compare(pair, tmp_path):
    shifted = tmp_path / "ids-copied"
    shutil.copytree(pair["eagle3"], shifted)
    config = json.loads((shifted / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in TAPS]  # converted, GenAI gets [2, 6, 9] verbatim
    (shifted / "config.json").write_text(json.dumps(config))
    report = bench(pair, shifted, reference_draft=str(pair["eagle3"]), baseline=False)
    gate = next(g for g in report["gate"]["checks"] if g["name"] == "engine_compare")
    assert not gate["passed"] and not report["gate"]["passed"]
    accepted = report["overall"]["acceptance"]["accepted"]
    assert accepted < report["compare"]["ours"]["overall"]["acceptance"]["accepted"] / 4, accepted
