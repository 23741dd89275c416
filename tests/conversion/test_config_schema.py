"""config.json values of the wrong JSON type (the fuzzer's last crash class) are refused when the config is read, with a
typed one-paragraph error naming the file, the (dotted) key, the value's type and the expected one; valid configs,
nulls where a reader takes them, and keys nothing reads still convert."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.convert import tree_fingerprint

import eagle_convert
from eagle_convert import errors
from eagle_convert.checkpoint.config_schema import check_config
from eagle_convert.cli import main
from eagle_convert.testing.tiny import TinyConfig

EAGLE3 = {"cfg": TinyConfig(num_hidden_layers=8), "kind": "eagle3"}
EAGLE1 = {"cfg": TinyConfig(num_hidden_layers=8), "kind": "eagle1"}
FOLD = {"to": "vllm", "fc_bias": "fold"}


def edit_config(folder: Path, **values) -> Path:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))
    return path


def refused(draft, target, out, match, **kwargs) -> errors.CorruptCheckpointError:
    """convert refuses with CorruptCheckpointError (matching `match`), leaves no output and changes no input."""
    before = tree_fingerprint(draft), tree_fingerprint(target)
    with pytest.raises(errors.CorruptCheckpointError, match=match) as info:
        eagle_convert.convert(str(draft), str(target), out, **kwargs)
    assert "re-download" in info.value.hint
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.eagle-convert-*"))
    assert (tree_fingerprint(draft), tree_fingerprint(target)) == before
    return info.value


# The fuzzer's reproducers (`make fuzz FUZZ_SEED=S FUZZ_ONLY=N`), then the same class in other places.
@pytest.mark.parametrize("head, side, key, value, kwargs, match", [
    (EAGLE1, "target", "vocab_size", "F32", FOLD,  # --seed 2 --only 23 (target.py _sizes)
     r"vocab_size is a JSON string \('F32'\), expected an integer\."),
    (EAGLE1, "draft", "num_key_value_heads", [[4]], FOLD,  # --seed 3 --only 30 (draft.py _build_spec)
     r"num_key_value_heads is a JSON array \(\[\[4\]\]\), expected an integer or null\."),
    (EAGLE3, "draft", "num_hidden_layers", [], {"to": "vllm"},  # --seed 3 --only 528 (variants.py detect_eagle3)
     r"num_hidden_layers is a JSON array \(\[\]\), expected an integer\."),
    (EAGLE1, "draft", "architectures", -1, FOLD,  # --seed 11 --only 787 (formats/ detect)
     r"architectures is a JSON number \(-1\), expected a list of strings or null\."),
    (EAGLE1, "draft", "hidden_size", True, {"to": "vllm-v0"},  # bool is not a size (int(True) would read 1)
     r"hidden_size is a JSON boolean \(True\), expected an integer\."),
    (EAGLE3, "draft", "hidden_size", None, {"to": "vllm"}, r"hidden_size is a JSON null \(None\), expected an integer"),
    (EAGLE3, "target", "num_hidden_layers", 1.5, {"to": "vllm"},
     r"num_hidden_layers is a JSON number \(1\.5\), expected an integer\."),
    (EAGLE3, "draft", "rms_norm_eps", "1e-5", {"to": "vllm"}, r"rms_norm_eps is a JSON string"),
    (EAGLE1, "target", "tie_word_embeddings", "false", {"to": "vllm-v0"},  # bool("false") would read True
     r"tie_word_embeddings is a JSON string \('false'\), expected true or false or null\."),
])
def test_a_wrong_typed_config_value_is_refused(pair, tmp_path, head, side, key, value, kwargs, match):
    target, draft, _ = pair(**head)
    path = edit_config(target if side == "target" else draft, **{key: value})
    err = refused(draft, target, tmp_path / "out", match, **kwargs)
    assert err.message.startswith(f"{path}: {key} ")  # the file, then the key


@pytest.mark.parametrize("values, dotted", [
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, "x"]}}, "eagle_config.eagle_aux_hidden_state_layer_ids"),
    ({"eagle_config": {"norm_output": "yes"}}, "eagle_config.norm_output"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": "8"}}, "rope_scaling.factor"),
    ({"rope_parameters": [10000.0]}, "rope_parameters"),
    ({"transformer_layer_config": {"hidden_size": [64]}}, "transformer_layer_config.hidden_size"),
])
def test_a_wrong_typed_nested_value_is_refused_by_its_dotted_key(pair, tmp_path, values, dotted):
    target, draft, _ = pair(**EAGLE3)
    path = edit_config(draft, **values)
    err = refused(draft, target, tmp_path / "out", "expected", to="vllm")
    assert err.message.startswith(f"{path}: {dotted} is a JSON ")


def test_a_wrong_typed_target_sub_config_is_refused(pair, tmp_path):
    target, draft, _ = pair(**EAGLE3)
    edit_config(target, quantization_config={"quant_method": "fp8", "weight_block_size": [128, "128"]},
                text_config={"vocab_size": {}})
    err = refused(draft, target, tmp_path / "out", "expected", to="vllm")
    assert ": quantization_config.weight_block_size is a JSON array" in err.message


def test_valid_values_nulls_and_unread_keys_still_convert(pair, tmp_path):
    """Negative control: the check refuses types, not keys it does not know nor nulls the readers accept."""
    target, draft, _ = pair(**EAGLE3)
    edit_config(draft, num_key_value_heads=None, head_dim=None, rope_theta=500000, draft_vocab_size=None,
                rope_scaling=None, architectures=None, some_exporter_key=[[4]], eagle_config={"unread": "F32"})
    edit_config(target, max_position_embeddings=None, some_other_key={"x": None}, torch_dtype="float32")
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out, to="vllm")
    assert (out / "model.safetensors").is_file()


def test_the_cli_refusal_is_one_paragraph_with_exit_1(pair, tmp_path):
    target, draft, _ = pair(**EAGLE1)
    edit_config(draft, num_key_value_heads=[[4]])
    run = CliRunner().invoke(main, ["convert", str(draft), "-t", str(target), "-o", str(tmp_path / "out"),
                                    "--to", "vllm", "--fc-bias", "fold"])
    assert run.exit_code == 1 and isinstance(run.exception, SystemExit), run.exception
    paragraph = " ".join(run.stderr.split())  # the CLI wraps its paragraph
    assert paragraph.startswith(f"error: {draft / 'config.json'}: num_key_value_heads is a JSON array")
    assert "Traceback" not in run.stderr and "\n\n" not in run.stderr.strip()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value, spec_key, ok", [
    (7, "hidden_size", True), (True, "hidden_size", False), (7.0, "hidden_size", False), (2**64, "vocab_size", True),
    (1e-5, "rms_norm_eps", True), (1, "rms_norm_eps", True), (False, "rms_norm_eps", False),
    ([1, 2], "eagle_aux_hidden_state_layer_ids", True), ([1, True], "eagle_aux_hidden_state_layer_ids", False),
    (None, "eagle_aux_hidden_state_layer_ids", True), (["A"], "architectures", True), ("A", "architectures", False),
    (None, "rope_scaling", True), ({}, "rope_scaling", True), ("x", "rope_scaling", False),
])
def test_the_table_checks_json_types(value, spec_key, ok):
    if ok:
        check_config({spec_key: value}, "config.json")
    else:
        with pytest.raises(errors.CorruptCheckpointError, match=f"config.json: {spec_key} is a JSON "):
            check_config({spec_key: value}, "config.json")


def test_every_golden_config_passes():
    configs = sorted(Path(__file__).parents[1].glob("golden/*/*/config.json"))
    assert len(configs) >= 8
    for path in configs:
        check_config(json.loads(path.read_text()), str(path))
