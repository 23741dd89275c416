"""Position and RoPE checks (positions/checks.py): one config fixture per documented failure, each caught by name
through `inspect --json` and, where it is an error, refused by `convert` (exit 1, one paragraph, nothing written, the
inputs untouched); a correct pair passes with no finding, and convert's output states the target's RoPE in both
rope_scaling and rope_parameters."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from support.convert import assert_nothing_left, flat, tree_fingerprint

from eagle_convert.cli.main import main
from eagle_convert.testing.gate_mistakes import edit_config
from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head, make_target

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 1024}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
MROPE = {"rope_type": "default", "mrope_section": [2, 1, 1]}


def engine_rope(config: dict, reader: str = "transformers5"):
    """The schedule engines compute (imported when used, so that each test fails on its own before the checks)."""
    from eagle_convert.rope.schedule import engine_rope as read

    return read(config, reader)


def cli(*args):
    """The real command in this process (CliRunner keeps exit code, stdout and stderr apart)."""
    return CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """A tiny target per RoPE (plain, llama3, yarn, mrope; theta 500000, limit 4096) with an EAGLE-3 head that copies
    the target's config (so the head's RoPE equals the target's) and keeps the release limit 2048."""
    root = tmp_path_factory.mktemp("positions")
    out = {}
    for name, scaling in (("plain", None), ("llama3", LLAMA3), ("yarn", YARN), ("mrope", MROPE)):
        cfg = TinyConfig(num_hidden_layers=3, rope_theta=500000.0, extra={"rope_scaling": scaling} if scaling else {})
        tensors = make_target(root / name / "target", cfg)
        make_eagle3_head(root / name / "draft", cfg, tensors, aux_layer_ids=[0, 1, 2])
        out[name] = root / name
    return out


def pair(pairs, tmp_path, base: str, change=None):
    """A copy of the `base` pair with the draft's config edited by `change(config)`."""
    folder = tmp_path / base
    shutil.copytree(pairs[base], folder)
    if change:
        edit_config(folder / "draft", change)
    return folder


def findings(folder, *extra) -> dict:
    result = cli("inspect", folder / "draft", "--target", folder / "target", "--json", *extra)
    assert result.exit_code == 0, result.stderr
    return {f["name"]: f for f in json.loads(result.stdout)["positions"]["findings"]}


def convert(folder, *extra):
    return cli("convert", folder / "draft", "--target", folder / "target", "-o", folder / "out", "--to", "vllm",
               "-q", *extra)


def assert_refused(folder, name: str, *extra):
    before = tree_fingerprint(folder / "draft")
    result = convert(folder, *extra)
    assert result.exit_code == 1 and result.stdout == ""
    message = flat(result.stderr)
    assert message.startswith("error: ") and f"[{name}]" in message and "--allow-rope-mismatch" in message
    assert "\n\n" not in result.stderr.strip()  # one paragraph
    assert_nothing_left(folder / "out")
    assert tree_fingerprint(folder / "draft") == before


def out_config(folder) -> dict:
    return json.loads((folder / "out" / "config.json").read_text())


def with_draft_limit(limit):
    return lambda c: c.update(max_position_embeddings=limit)


# ---- a correct pair ------------------------------------------------------------------------------------------------

def test_a_correct_pair_has_no_finding_and_convert_writes_both_keys_equal_to_the_target(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "llama3", with_draft_limit(4096))
    assert findings(folder) == {}
    result = convert(folder)
    assert result.exit_code == 0 and "warning" not in result.stderr
    written, target = out_config(folder), json.loads((folder / "target" / "config.json").read_text())
    assert written["rope_scaling"] == target["rope_scaling"]
    assert written["rope_parameters"] == {**target["rope_scaling"], "rope_theta": 500000.0}
    assert engine_rope(written) == engine_rope(target)
    # each key alone says the same schedule: what a stack reading only one of them runs
    for key in ("rope_scaling", "rope_parameters"):
        alone = {k: v for k, v in written.items() if k not in ("rope_scaling", "rope_parameters")} | {key: written[key]}
        assert engine_rope(alone) == engine_rope(target), key


def test_a_negative_control_the_same_pair_with_yarn_is_not_equal(pairs):
    """engine_rope tells schedules apart: the comparison above cannot pass by accident."""
    llama3 = json.loads((pairs["llama3"] / "target" / "config.json").read_text())
    yarn = json.loads((pairs["yarn"] / "target" / "config.json").read_text())
    assert engine_rope(llama3) != engine_rope(yarn)


# ---- one fixture per documented failure ----------------------------------------------------------------------------

def test_draft_2048_against_a_longer_target(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "plain")
    found = findings(folder)
    assert set(found) == {"draft_limit_below_target", "short_training_context"}
    limit = found["draft_limit_below_target"]
    assert limit["severity"] == "warning" and "2048" in limit["message"] and "4096" in limit["message"]
    assert set(limit["engines"]) == {"vllm", "sglang", "ours"} and "stops drafting" in limit["engines"]["vllm"]
    assert "τ" in found["short_training_context"]["message"]
    # convert raises the limit, records the draft's own, and inspect still says what the head was made for
    result = convert(folder)
    assert result.exit_code == 0
    assert "[short_training_context]" in flat(result.stderr) and "[draft_limit_below_target]" not in result.stderr
    written = out_config(folder)
    assert written["max_position_embeddings"] == 4096
    assert written["eagle_convert_source_max_position_embeddings"] == 2048
    again = cli("inspect", folder / "out", "--target", folder / "target", "--json")
    after = {f["name"]: f for f in json.loads(again.stdout)["positions"]["findings"]}
    assert set(after) == {"short_training_context"} and "recorded by convert" in after["short_training_context"][
        "message"]


def test_dropped_rope_scaling_is_named_and_convert_keeps_the_drafts_plain_rope(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "llama3", lambda c: (c.pop("rope_scaling"), c.update(max_position_embeddings=4096)))
    found = findings(folder)
    assert set(found) == {"rope_scaling_dropped"} and found["rope_scaling_dropped"]["severity"] == "warning"
    assert "speculators PR#574" in found["rope_scaling_dropped"]["message"]
    assert convert(folder).exit_code == 0  # a warning: released heads state plain RoPE for llama3 targets
    written = out_config(folder)
    assert written["rope_scaling"] is None and written["rope_parameters"] == {"rope_type": "default",
                                                                              "rope_theta": 500000.0}


def test_yarn_fallback_is_an_error(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "yarn", lambda c: c.update(rope_scaling=LLAMA3, max_position_embeddings=4096))
    found = findings(folder)
    assert set(found) == {"yarn_fallback"} and found["yarn_fallback"]["severity"] == "error"
    assert_refused(folder, "yarn_fallback")
    # a head trained with its own schedule: the escape keeps it, and says so
    assert convert(folder, "--allow-rope-mismatch").exit_code == 0
    assert out_config(folder)["rope_scaling"]["rope_type"] == "llama3"


def test_rope_parameters_only_config_is_named_and_convert_writes_both_keys(pairs, tmp_path):
    def transformers5(c):
        c.pop("rope_theta")
        c["rope_parameters"] = {**c.pop("rope_scaling"), "rope_theta": 500000.0}
        c["max_position_embeddings"] = 4096

    folder = pair(pairs, tmp_path, "llama3", transformers5)
    found = findings(folder)
    assert set(found) == {"rope_parameters_only"} and found["rope_parameters_only"]["severity"] == "warning"
    assert "plain RoPE (theta 10000)" in found["rope_parameters_only"]["message"]  # what an older stack runs
    assert convert(folder).exit_code == 0
    written, target = out_config(folder), json.loads((folder / "target" / "config.json").read_text())
    assert written["rope_scaling"] == target["rope_scaling"] and written["rope_theta"] == 500000.0
    for reader in ("legacy", "parameters_first"):
        assert engine_rope(written, reader) == engine_rope(target), reader


def test_mrope_section_missing_and_mismatched(pairs, tmp_path):
    same = pair(pairs, tmp_path, "mrope", with_draft_limit(4096))
    assert {n: f["severity"] for n, f in findings(same).items()} == {"mrope": "info"}
    missing = pair(pairs, tmp_path / "missing", "mrope",
                   lambda c: (c.pop("rope_scaling"), c.update(max_position_embeddings=4096)))
    found = findings(missing)
    assert set(found) == {"mrope_section_missing"} and "llama_eagle3.py" in found["mrope_section_missing"][
        "engines"]["sglang"]
    other = pair(pairs, tmp_path / "other", "mrope", lambda c: c.update(
        rope_scaling={**MROPE, "mrope_section": [1, 2, 1]}, max_position_embeddings=4096))
    assert findings(other)["mrope_mismatch"]["severity"] == "error"
    assert_refused(other, "mrope_mismatch")


def test_sliding_window_in_the_draft(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "plain", lambda c: c.update(sliding_window=64, layer_types=["sliding_attention"],
                                                               max_position_embeddings=4096))
    found = findings(folder)
    assert set(found) == {"sliding_window"}
    engines = found["sliding_window"]["engines"]
    assert "layer_types" in engines["vllm"] and "--speculative-draft-window-size" in engines["sglang"]
    assert convert(folder).exit_code == 0
    assert out_config(folder)["layer_types"] == ["sliding_attention"] and out_config(folder)["sliding_window"] == 64


def test_qwen2_style_disabled_window_is_no_finding(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "plain", lambda c: c.update(sliding_window=64, use_sliding_window=False,
                                                               max_position_embeddings=4096))
    assert findings(folder) == {}


def test_theta_mismatch_in_a_scaled_schedule_is_an_error(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "llama3", lambda c: c.update(rope_theta=10000.0, max_position_embeddings=4096))
    found = findings(folder)
    assert set(found) == {"rope_theta_mismatch"} and found["rope_theta_mismatch"]["severity"] == "error"
    assert_refused(folder, "rope_theta_mismatch")


def test_theta_mismatch_with_plain_rope_is_a_warning(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "plain", lambda c: c.update(rope_theta=10000.0, max_position_embeddings=4096))
    found = findings(folder)
    assert set(found) == {"rope_theta_mismatch"} and found["rope_theta_mismatch"]["severity"] == "warning"
    assert convert(folder).exit_code == 0 and out_config(folder)["rope_theta"] == 10000.0


def test_max_model_len_beyond_the_drafts_limit(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "plain", with_draft_limit(4096))
    assert findings(folder, "--max-model-len", "4096") == {}
    found = findings(folder, "--max-model-len", "16384")
    assert set(found) == {"draft_limit_below_max_model_len", "target_limit_below_max_model_len",
                          "short_training_context"}
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in found["target_limit_below_max_model_len"]["engines"]["vllm"]
    result = convert(folder, "--max-model-len", "16384")
    assert result.exit_code == 0 and "[draft_limit_below_max_model_len]" in flat(result.stderr)


def test_llama3_scaling_without_original_limit_is_compared_and_written_as_engines_fill_it(pairs, tmp_path):
    """transformers fills original_max_position_embeddings from max_position_embeddings: the draft's 2048 is not the
    target's 1024, and convert, which raises the limit, must write the value the head ran with."""
    def no_original(c):
        c["rope_scaling"] = {k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}

    folder = pair(pairs, tmp_path, "llama3", no_original)
    found = findings(folder)
    assert found["rope_scaling_mismatch"]["severity"] == "error"
    assert "original_max_position_embeddings 2048 vs 1024" in found["rope_scaling_mismatch"]["message"]
    assert_refused(folder, "rope_scaling_mismatch")
    assert convert(folder, "--allow-rope-mismatch").exit_code == 0
    written = out_config(folder)
    assert written["max_position_embeddings"] == 4096
    assert written["rope_scaling"]["original_max_position_embeddings"] == 2048 == \
        written["rope_parameters"]["original_max_position_embeddings"]


def test_bench_refuses_a_rope_error_before_loading_a_model(pairs, tmp_path):
    folder = pair(pairs, tmp_path, "yarn", lambda c: c.update(rope_scaling=LLAMA3))
    result = cli("bench", "-t", folder / "target", "-d", folder / "draft", "--max-new-tokens", 2, "-q")
    assert result.exit_code == 1 and "[yarn_fallback]" in flat(result.stderr)


def test_bench_reports_the_findings_in_its_json(pairs, tmp_path):
    import eagle_convert

    folder = pair(pairs, tmp_path, "plain")
    report = eagle_convert.bench(str(folder / "target"), str(folder / "draft"), k=2, max_new_tokens=2,
                                 prompts=[{"prompt_ids": [5, 6, 7]}], baseline=False, max_model_len=8192)
    positions = report.to_dict()["positions"]
    assert positions["max_model_len"] == 8192
    assert {f["name"] for f in positions["findings"]} == {
        "draft_limit_below_target", "draft_limit_below_max_model_len", "target_limit_below_max_model_len",
        "short_training_context"}
