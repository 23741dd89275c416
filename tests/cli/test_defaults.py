"""No default that fails, serve commands that name their method, hints spelled for the caller (issue 29, 8 and 10).

* `convert` without --to picks a layout that holds the head: EAGLE-1 -> vllm-v0 (byte for byte what it always wrote),
  EAGLE-3 -> vllm (vllm-v0 cannot hold it).
* Every serve command names the method: vLLM (0.33) guesses it from the draft folder's NAME when `method` is absent,
  so an EAGLE-1 head in a folder called `eagle3-out` must still be served as `eagle`, and the reverse.
* An option named in an error reads `--force` on the command line and `force=True` from Python."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from click.testing import CliRunner

import eagle_convert
from eagle_convert import errors
from eagle_convert.cli.main import main
from eagle_convert.testing.tiny import TinyConfig

CFG = TinyConfig(num_hidden_layers=8)


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def served_method(serve: str, out_config: dict) -> str:
    """The method the engine will run, read from the printed command as the engine reads it (and, for a speculators
    checkpoint served as `vllm serve OUT`, from the config the command points at)."""
    words = shlex.split(serve.split("  #")[0])
    if "--speculative-config" in words:
        spec = json.loads(words[words.index("--speculative-config") + 1])
        assert "method" in spec, f"no method: vLLM would guess it from the folder's name: {serve}"
        return spec["method"]
    if "--speculative-algorithm" in words:
        return {"EAGLE": "eagle", "EAGLE3": "eagle3"}[words[words.index("--speculative-algorithm") + 1]]
    said = re.search(r"# method (\w+)", serve)
    assert said and said.group(1) == out_config["speculators_model_type"], serve
    return out_config["speculators_model_type"]


@pytest.mark.parametrize("kind,folder,layouts,method", [
    ("eagle1", "eagle3-out", ("vllm-v0", "vllm", "sglang"), "eagle"),
    ("eagle3", "eagle-x", ("vllm", "speculators", "sglang"), "eagle3"),
])
def test_every_serve_command_names_the_method_whatever_the_folder_is_called(pair, tmp_path, kind, folder, layouts,
                                                                             method):
    target, draft, _ = pair(cfg=CFG, kind=kind)
    for to in layouts:
        out = tmp_path / to / folder  # a folder named after the OTHER kind: vLLM's name guess would misroute
        run = cli("convert", draft, "-t", target, "-o", out, "--to", to, "-q", "--fc-bias", "fold")
        assert run.exit_code == 0, run.output
        serve = next(line for line in run.stdout.splitlines() if line.startswith("serve: ")).removeprefix("serve: ")
        config = json.loads((out / "config.json").read_text())
        assert served_method(serve, config) == method, (to, serve)
        assert serve in (out / "README.md").read_text()  # the model card carries the same command


def test_a_command_without_method_is_caught(tmp_path):
    # negative control: the reader above refuses the command this tool printed for vllm-v0 before issue 29
    with pytest.raises(AssertionError, match="no method"):
        served_method(f"vllm serve T --speculative-config '{json.dumps({'model': str(tmp_path / 'eagle3-out')})}'", {})


def test_an_eagle3_head_without_to_is_written_for_todays_vllm(pair, tmp_path):
    target, draft, _ = pair(cfg=CFG, kind="eagle3")
    run = cli("convert", draft, "-t", target, "-o", tmp_path / "out", "-q")
    assert run.exit_code == 0, run.output  # before: "vLLM v0 had no EAGLE-3 support" (the default vllm-v0)
    assert "EAGLE3 head -> vllm (" in run.stdout
    assert '"method": "eagle3"' in run.stdout
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "py", dry_run=True)  # the API's default too
    assert result.plan.layout == "vllm"


def test_an_eagle1_head_without_to_is_written_exactly_as_before(pair, tmp_path):
    target, draft, _ = pair(cfg=CFG)
    eagle_convert.convert(str(draft), str(target), tmp_path / "default")
    eagle_convert.convert(str(draft), str(target), tmp_path / "v0", to="vllm-v0")
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "default" / name).read_bytes() == (tmp_path / "v0" / name).read_bytes(), name
    assert json.loads((tmp_path / "default" / "config.json").read_text())["model_type"] == "eagle"


def test_the_help_states_the_rule():
    said = " ".join(cli("convert", "--help").stdout.split())
    assert "default by the head's kind: EAGLE-1 -> vllm-v0, EAGLE-3 -> vllm" in said


def test_a_python_caller_is_told_force_true_and_a_cli_user_force(pair, tmp_path):
    target, draft, _ = pair(cfg=CFG)
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out)
    with pytest.raises(errors.OutputPathError) as info:
        eagle_convert.convert(str(draft), str(target), out)
    assert info.value.hint == "Pass force=True to replace it, or choose another out folder."
    assert "--force" not in str(info.value)
    run = cli("convert", draft, "-t", target, "-o", out, "-q")
    assert run.exit_code == 1
    assert "Pass --force to replace it, or choose another -o folder." in " ".join(run.stderr.split())
    # The CLI's spelling ends with the command: the same error read again from Python is spelled for Python.
    assert "force=True" in errors.EagleConvertError("x", f"Pass {errors.option('force')}.").hint


def test_option_spellings():
    fold, flag = errors.option("fc_bias", "fold"), errors.option("allow_nonfinite")
    assert errors.spelled(f"use {fold} or {flag}") == 'use fc_bias="fold" or allow_nonfinite=True'
    with errors.options_spelled_for_cli():
        assert errors.spelled(f"use {fold} or {flag}") == "use --fc-bias fold or --allow-nonfinite"
    assert errors.spelled("a {json: 1} | b") == "a {json: 1} | b"  # text without markers is left as it is


def test_a_plain_draft_on_a_scaled_target_is_told_about_theta_too():
    from eagle_convert.positions.checks import pair_findings
    from eagle_convert.rope.schedule import Rope

    scaled = Rope("llama3", 500000.0, {"factor": 8.0})
    found = {f.name: f for f in pair_findings(Rope("default", 10000.0), scaled)}
    assert set(found) == {"rope_scaling_dropped"}  # the doc's table: no rope_theta_mismatch for this pair
    assert "rope_theta (500000; the draft states 10000" in found["rope_scaling_dropped"].hint
    same_base = {f.name: f for f in pair_findings(Rope("default", 500000.0), scaled)}
    assert "rope_theta" not in same_base["rope_scaling_dropped"].hint  # negative control: equal bases, no theta advice
    plain = {f.name: f for f in pair_findings(Rope("default", 10000.0), Rope("default", 500000.0))}
    assert plain["rope_theta_mismatch"].severity == "warning"  # both plain: the theta row's warning
