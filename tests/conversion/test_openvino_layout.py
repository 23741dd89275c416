"""`convert --to openvino` without OpenVINO (the real export: tests/engines/test_bench_openvino.py): the plan states
GenAI's count of the head's layers (rt_info hidden_layers_list = ids - 1, never GenAI's default); what GenAI cannot
express is refused by name with nothing written; a missing or broken OpenVINO interpreter is one paragraph, exit 1,
nothing written; GenAI's per-step counts read as the counters every engine reports."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys

import pytest
from support.convert import assert_nothing_left, flat, run_cli
from support.engine_pair import TAPS, build_engine_pair
from support.variant_heads import TARGET, VARIANTS, make_variant_head

import eagle_convert
from eagle_convert import errors
from eagle_convert.conversion.openvino_export import INSTALL_HINT, NEEDED, here_has_openvino
from eagle_convert.engines.generation import stats_from_counters
from eagle_convert.engines.openvino_offline import counters_from_rounds
from eagle_convert.layouts import LAYOUTS
from eagle_convert.layouts.variant_table import _BASE
from eagle_convert.testing.tiny import make_target

REFUSED = {"eagle31": "fc_norm", "specforge31": "fc_norm", "aux4": "exactly 3 target layers",
           "no_aux": "exactly 3 target layers", "two_layers": "one decoder layer", "qwen3": "Qwen3 draft",
           "fc_bias": "fc has no bias", "norm_before_residual": "norm_before_residual",
           "norm_before_fc": "no norm before fc"}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    root = tmp_path_factory.mktemp("openvino-variants")
    make_target(root / "target", TARGET)
    for name in [*REFUSED, "base"]:
        make_variant_head(root / name, **VARIANTS[name])
    return root


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_engine_pair(tmp_path_factory.mktemp("openvino-pair"))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_genai_cannot_run_is_refused_by_name(variants, name, tmp_path):
    with pytest.raises(errors.UnsupportedConversionError, match=REFUSED[name]):
        eagle_convert.convert(str(variants / name), str(variants / "target"), tmp_path / "out", to="openvino")
    assert_nothing_left(tmp_path / "out")


@pytest.mark.parametrize("changes, message", [
    ({"norm_output": True}, "norm_output"), ({"hidden_act": "gelu"}, "SiLU"),
    ({"base_model_type": "qwen2"}, "qwen2 draft"), ({"qkv_bias": True}, "q/k/v bias"),
    ({"aux_layer_ids": (0, 16, 29)}, "no id for the embedding output"),
])
def test_flags_genai_has_no_form_for_are_refused(changes, message):
    assert re.search(message, LAYOUTS["openvino"].refusal(dataclasses.replace(_BASE, **changes), frozenset()))
    assert LAYOUTS["openvino"].refusal(_BASE, frozenset()) is None  # negative control: the plain head is written


def _plan(pair, draft) -> dict:
    return eagle_convert.convert(str(draft), str(pair["target"]), None, to="openvino", dtype="float32",
                                 dry_run=True).plan.to_dict()


def test_the_plan_writes_genai_s_count_of_the_head_s_layers(pair, tmp_path):
    plan = _plan(pair, pair["eagle3"])
    assert plan["ir_export"] == {"weight_format": "fp32",
                                 "rt_info": {"eagle3_mode": "True", "hidden_layers_list": [i - 1 for i in TAPS]}}
    assert plan["config"]["architectures"] == ["LlamaForCausalLMEagle3"]
    names = {t["name"] for t in plan["tensors"]}
    assert {"midlayer.self_attn.q_proj.weight", "fc.weight", "d2t", "embed_tokens.weight"} <= names
    assert "lm_head.weight" in names and not any(n.startswith("layers.") for n in names)
    # negative control: a head tapping other layers gets other ids (the list follows the head, not a default)
    other = tmp_path / "other"
    shutil.copytree(pair["eagle3"], other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "eagle_aux_hidden_state_layer_ids": [1, 4, 10]}))
    assert _plan(pair, other)["ir_export"]["rt_info"]["hidden_layers_list"] == [0, 3, 9]


def test_without_an_openvino_interpreter_convert_says_what_to_install(pair, tmp_path):
    if here_has_openvino():
        pytest.skip("this interpreter imports openvino and optimum-intel: it would export")
    env = {**os.environ, "OPENVINO_PYTHON": ""}
    result = run_cli("convert", pair["eagle3"], "-t", pair["target"], "-o", tmp_path / "out", "--to", "openvino",
                     env=env)
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "\n\n" not in result.stderr.strip()
    text = flat(result.stderr)
    assert "eagle-convert[openvino]" in text and "OPENVINO_PYTHON" in text and all(m in text for m in NEEDED)
    assert "Traceback" not in result.stderr
    assert_nothing_left(tmp_path / "out")


@pytest.mark.parametrize("python, message", [("/nonexistent/python", "is not an executable file"),
                                             (sys.executable, "cannot import")])
def test_an_interpreter_without_openvino_is_refused_before_anything_is_written(pair, tmp_path, python, message):
    if python == sys.executable and here_has_openvino():
        pytest.skip("this interpreter imports openvino and optimum-intel")
    with pytest.raises(errors.EngineError, match=message) as caught:
        eagle_convert.convert(str(pair["eagle3"]), str(pair["target"]), tmp_path / "out", to="openvino",
                              engine_python=python)
    assert caught.value.hint == INSTALL_HINT
    assert_nothing_left(tmp_path / "out")


def test_a_failing_export_leaves_nothing(pair, tmp_path):
    """An interpreter that passes the import probe but whose export fails: the staging folder goes, OUT never
    appears, and the error quotes the exporter's last lines."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\ncase "$1" in -c) exit 0;; esac\necho "optimum says no" >&2\nexit 3\n')
    fake.chmod(0o755)
    with pytest.raises(errors.EngineError, match="optimum says no"):
        eagle_convert.convert(str(pair["eagle3"]), str(pair["target"]), tmp_path / "out", to="openvino",
                              engine_python=str(fake))
    assert_nothing_left(tmp_path / "out")


def test_genai_s_rounds_read_as_every_engine_s_counters():
    counters = counters_from_rounds([1, 0, 3, 2, 1], 3)
    assert counters == {"num_drafts": 5, "num_draft_tokens": 15, "num_accepted_tokens": 7,
                        "num_accepted_tokens_per_pos": [4, 2, 1]}
    assert stats_from_counters(3, counters).histogram == (1, 2, 1, 1)
    with pytest.raises(errors.EngineError, match="4 accepted drafts in a round of k = 3"):
        counters_from_rounds([1, 4], 3)


def test_the_openvino_extra_pins_what_the_tier_installs():
    """pyproject's `eagle-convert[openvino]` and scripts/engines/openvino-requirements.txt (`make openvino-env`) name
    the same pins (torch aside: the extra leaves the CPU build to the user, as INSTALL_HINT says)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["openvino"]
    lines = (root / "scripts" / "engines" / "openvino-requirements.txt").read_text().splitlines()
    pinned = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert sorted(extra) == sorted(p for p in pinned if not p.startswith("torch=="))


def test_genai_s_default_taps_are_one_layer_deeper_than_the_eagle_reference_s():
    from eagle_convert.benchmark.openvino_bench import genai_default_taps
    from eagle_convert.spec import default_aux_layer_ids

    # SmolLM2-135M's 30 layers: GenAI taps the outputs of 2, 15, 27 = the inputs of 3, 16, 28
    assert genai_default_taps(30) == [2, 15, 27] == list(default_aux_layer_ids(30))
    assert LAYOUTS["openvino"].ir_export(dataclasses.replace(_BASE, aux_layer_ids=(2, 15, 27)), _ctx()).rt_info[
        "hidden_layers_list"] == [1, 14, 26]


def _ctx():
    from eagle_convert.layouts.base import OutputContext

    return OutputContext(target_label="t", target_config={}, out_label="o", dtype_name="bfloat16")


def test_bfloat16_is_exported_as_fp16_and_said():
    export = LAYOUTS["openvino"].ir_export(_BASE, _ctx())
    assert export.weight_format == "fp16" and "no bfloat16" in export.notes[0]


def test_a_genai_answer_reaches_the_report_as_counters_with_no_disabled_rounds(tmp_path):
    """GenAI's reply through OpenVinoOffline.generate into a prompt's report: its own totals stay in `genai`, and the
    drafting-disabled rounds (vLLM --concurrency only) stay unmeasured (None), not GenAI's dict added to a count."""
    from types import SimpleNamespace

    from eagle_convert.engines.openvino_offline import OpenVinoOffline

    engine = OpenVinoOffline("python", tmp_path, tmp_path, k=3, precision="f32", what="GenAI")
    genai = {"num_accepted_tokens": 2}
    engine._process = SimpleNamespace(request=lambda command, timeout: {
        "tokens": [5, 6, 7], "seconds": 0.1, "rounds": [1, 0, 1], "genai": genai})
    out = engine.generate([1, 2], max_new_tokens=3, temperature=0.0, seed=0, stop_token_ids=(0,))
    item = SimpleNamespace(drafting_disabled_rounds=None)
    out.record_rounds(item)
    assert out.genai == genai and out.disabled_rounds is None and item.drafting_disabled_rounds is None
    assert out.counters["num_accepted_tokens"] == 2 and out.counters["num_drafts"] == 3
    engine._process = None
    engine.close()
