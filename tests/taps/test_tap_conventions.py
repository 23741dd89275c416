"""The one tap convention (issue 31): every place target layer ids are stored, translated through one table; every
layout reads and writes through it; a head without ids gets the EAGLE reference default, named; [] is not absent."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.convert import flat, run_cli
from support.variants import load

import eagle_convert
from eagle_convert import errors
from eagle_convert.draft.variants import detect_eagle3
from eagle_convert.kinds import EAGLE3
from eagle_convert.layouts import LAYOUTS
from eagle_convert.layouts.base import OutputContext
from eagle_convert.layouts.registry import detect_layout
from eagle_convert.layouts.sglang import SGLang
from eagle_convert.taps.conventions import AUX_IDS, CONVENTIONS, read_aux_ids, translate
from eagle_convert.testing.tiny import TinyConfig

TARGET = TinyConfig(num_hidden_layers=12)  # the EAGLE reference default for 12 layers: [2, 6, 9]
INTERNAL = (2, 6, 9)  # the inputs of layers 2, 6 and 9
OUTPUTS = [1, 5, 8]  # the same layers, counted as the outputs of the layers before
# What each store holds for INTERNAL, written out by hand (not computed from the table under test).
STORED = {"vllm": [2, 6, 9], "vllm-nested": [2, 6, 9], "sglang-nested": OUTPUTS, "gguf": [2, 6, 9],
          "openvino": OUTPUTS, "dflash": OUTPUTS, "speculators-dflash": [2, 6, 9],
          "gguf-dflash": [2, 6, 9]}
# Every EAGLE-3 output layout, and where it states the ids: (path, stored numbers).
WRITTEN = {
    "vllm": {(AUX_IDS,): [2, 6, 9], ("eagle_config", AUX_IDS): [2, 6, 9]},
    "speculators": {(AUX_IDS,): [2, 6, 9], ("transformer_layer_config", "eagle_config", AUX_IDS): [2, 6, 9]},
    "sglang": {("eagle_config", AUX_IDS): OUTPUTS},
    "gguf": {("eagle3.target_layers",): ["ARRAY[INT32]", [2, 6, 9]]},  # GGUF metadata: [type, value]
    # the config optimum-intel exports from (vLLM's count); what GenAI reads is the IR's rt_info (test below)
    "openvino": {(AUX_IDS,): [2, 6, 9], ("eagle_config", AUX_IDS): [2, 6, 9]},
}


def test_the_table_covers_every_store_and_counts_each_as_documented():
    assert set(STORED) == set(CONVENTIONS)
    for name, row in CONVENTIONS.items():
        config: dict = {}
        row.write(config, INTERNAL)
        node = config
        for key in row.path:
            node = node[key]
        assert node == STORED[name], name
        assert row.read(config) == STORED[name] and row.to_internal(row.read(config)) == INTERNAL, name
    assert CONVENTIONS["gguf"].path == ("eagle3.target_layers",)  # one GGUF key with a dot, not a nested dict


@pytest.mark.parametrize("source, destination, ids, expected", [
    ("dflash", "speculators-dflash", [1, 5, 8], [2, 6, 9]),  # vLLM's speculators reader: target = aux - 1
    ("speculators-dflash", "dflash", [2, 6, 9], [1, 5, 8]),
    ("vllm", "openvino", [2, 6, 9], [1, 5, 8]),  # GenAI taps outputs: an EAGLE head's ids go in minus one
    ("sglang-nested", "gguf", [1, 5, 8], [2, 6, 9]),
    ("vllm", "vllm-nested", [2, 6, 9], [2, 6, 9]),
])
def test_translate_between_stores(source, destination, ids, expected):
    assert translate(ids, source, destination) == expected


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """A 12-layer target, an EAGLE-3 head without ids (`absent/`) and one stating [2, 6, 9] (`stated/`)."""
    from eagle_convert.testing.tiny import make_eagle3_head, make_target
    root = tmp_path_factory.mktemp("taps")
    tensors = make_target(root / "target", TARGET)
    make_eagle3_head(root / "absent", TARGET, tensors)
    make_eagle3_head(root / "stated", TARGET, tensors, aux_layer_ids=list(INTERNAL))
    return root


def written(layout, spec, target_config: dict) -> dict:
    ctx = OutputContext(target_label="t", target_config=target_config, out_label="o", dtype_name="float32")
    return layout.output_config(spec, ctx)


def read_back(layout, head, config: dict) -> tuple:
    """What a reader makes of a layout's output: the layout detected from its config and tensor names, its ids."""
    names = frozenset(layout.output_names(head.spec, frozenset(head.tensors)))
    detected, _ = detect_layout(config, names)
    return read_aux_ids(detected.flat_config(config), detected.nested_taps, "out")


def eagle3_layouts():
    return sorted(n for n, lay in LAYOUTS.items() if lay.writable and EAGLE3 in lay.kinds and not lay.from_target)


def test_every_eagle3_output_layout_is_in_the_table():
    assert eagle3_layouts() == sorted(WRITTEN)


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_each_layout_writes_each_store_in_its_count_and_reads_it_back(heads, name):
    head = load(heads / "stated", heads / "target")
    config = written(LAYOUTS[name], head.spec, json.loads((heads / "target" / "config.json").read_text()))
    found = {}
    for path in WRITTEN[name]:
        node = config
        for key in path[:-1]:
            node = node.get(key, {})
        found[path] = node.get(path[-1])
    assert found == WRITTEN[name]
    assert (AUX_IDS in config) == ((AUX_IDS,) in WRITTEN[name])  # SGLang: one place, one convention
    if LAYOUTS[name].readable:  # GGUF is written only (the llama.cpp tier runs it)
        assert read_back(LAYOUTS[name], head, config)[0] == INTERNAL


def test_the_openvino_ir_states_genai_s_count_in_its_rt_info(heads):
    head = load(heads / "stated", heads / "target")
    ctx = OutputContext(target_label="t", target_config={}, out_label="o", dtype_name="float32")
    assert LAYOUTS["openvino"].ir_export(head.spec, ctx).rt_info["hidden_layers_list"] == OUTPUTS


class ForgotToTranslate(SGLang):
    """An SGLang layout that writes the internal ids into eagle_config as they are (the bug issue 31 names)."""

    def output_config(self, spec, ctx):
        config = super().output_config(spec, ctx)
        config["eagle_config"][AUX_IDS] = list(spec.aux_layer_ids)
        return config


def test_a_layout_that_forgot_to_translate_is_caught(heads):  # negative control for the round trip above
    head = load(heads / "stated", heads / "target")
    target_config = json.loads((heads / "target" / "config.json").read_text())
    config = written(ForgotToTranslate(), head.spec, target_config)
    assert read_back(SGLang(), head, config)[0] == (3, 7, 10)  # one layer deeper than trained: caught
    assert read_back(SGLang(), head, written(SGLang(), head.spec, target_config))[0] == INTERNAL


def test_the_modelopt_nested_form_counts_outputs():
    config = {"eagle_config": {AUX_IDS: OUTPUTS}}
    assert read_aux_ids(config, "sglang-nested", "h") == (INTERNAL, "sglang-nested")
    assert read_aux_ids(config, "vllm-nested", "h") == ((1, 5, 8), "vllm-nested")  # the raw vLLM layout's reading
    assert read_aux_ids({AUX_IDS: [2, 6, 9], **config}, "sglang-nested", "h") == (INTERNAL, "sglang-nested")
    with pytest.raises(errors.LayoutError, match=r"layer outputs: the inputs of \[3, 7, 10\]"):
        read_aux_ids({AUX_IDS: [2, 6, 9], "eagle_config": {AUX_IDS: [2, 6, 9]}}, "sglang-nested", "h")


SHAPES = {"layers.0.mlp.up_proj.weight": (128, 64), "norm.weight": (64,)}
FC = {"fc.weight": (64, 192)}


def variant(config, shapes, layers=12):
    return detect_eagle3(config, shapes, hidden=64, target_config={"num_hidden_layers": layers} if layers else None,
                         label="head")


def test_absent_ids_get_the_eagle_reference_default_named():
    v = variant({}, {**SHAPES, **FC})
    assert (v.aux_layer_ids, v.aux_ids_origin) == (INTERNAL, "default")
    assert any("absent in the draft: the EAGLE reference default [2, 6, 9] ([2, N//2, N-3]) for a 12-layer" in n
               for n in v.notes)
    unknown = variant({}, {**SHAPES, **FC}, layers=None)  # no target: nothing guessed
    assert (unknown.aux_layer_ids, unknown.aux_ids_origin) == (None, "absent")


def test_an_empty_list_is_not_absent():
    with pytest.raises(errors.LayoutError, match="is an empty list, but fc.weight reads aux states"):
        variant({AUX_IDS: []}, {**SHAPES, **FC})
    with pytest.raises(errors.LayoutError, match="is an empty list"):
        variant({"eagle_config": {AUX_IDS: []}}, {**SHAPES, **FC})
    stated, none = variant({AUX_IDS: []}, SHAPES), variant({}, SHAPES)  # no fc: the head reads no aux states
    assert (stated.aux_layer_ids, stated.aux_ids_origin) == ((), "vllm")
    assert (none.aux_layer_ids, none.aux_ids_origin) == ((), "none")
    assert "stated empty" in stated.sources["aux_layer_ids"] and "none" in none.sources["aux_layer_ids"]


def test_convert_of_a_head_without_ids_writes_and_names_the_default(heads, tmp_path):
    result = eagle_convert.convert(str(heads / "absent"), str(heads / "target"), tmp_path / "out", to="sglang")
    note = "aux layer ids absent in the draft: the EAGLE reference default [2, 6, 9] ([2, N//2, N-3]) for a 12-layer"
    assert any(note in n for n in result.plan.notes)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["eagle_config"][AUX_IDS] == OUTPUTS  # written, in SGLang's count: never left to its own default
    assert note in (tmp_path / "out" / "README.md").read_text()


def test_inspect_shows_the_layers_in_every_engines_count(heads):
    report = eagle_convert.inspect(str(heads / "stated"), str(heads / "target")).to_dict()
    taps = report["taps"]
    assert taps["internal"] == [2, 6, 9] and taps["origin"] == "vllm"
    assert {n: c["ids"] for n, c in taps["conventions"].items()} == STORED
    absent = eagle_convert.inspect(str(heads / "absent")).to_dict()["taps"]  # no target: not guessed
    assert absent["internal"] is None and absent["origin"] == "absent" and "pass --target" in absent["line"]
    run = run_cli("inspect", heads / "absent", "--target", heads / "target")
    assert run.returncode == 0, run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith("target layers feeding the head:"))
    assert flat(line).startswith("target layers feeding the head: inputs of [2, 6, 9] (absent in the draft: the "
                                 "EAGLE reference default [2, N//2, N-3] for a 12-layer target) = vLLM")
    assert "OpenVINO hidden_layers_list [1, 5, 8]" in line and "DFlash target_layer_ids [1, 5, 8]" in line
    assert "llama.cpp eagle3.target_layers [2, 6, 9]" in line and "SGLang/ModelOpt eagle_config ids [1, 5, 8]" in line


def test_translation_keeps_the_spec_otherwise_equal(heads):
    stated, absent = load(heads / "stated", heads / "target"), load(heads / "absent", heads / "target")
    assert stated.spec == dataclasses.replace(absent.spec, extra=stated.spec.extra)  # the origin is not the head
    assert (stated.spec.aux_ids_origin, absent.spec.aux_ids_origin) == ("vllm", "default")
