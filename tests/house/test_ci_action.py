"""The CI integrations run exactly as written: the composite GitHub Action (action.yml) and the Makefile snippet
(ci/eagle-convert.mk), on a tiny pair, offline.

The Action is run (by tests/support/gha.py) the way a runner runs a composite action: every `run:` step, with
`${{ ... }}` expressions substituted, its `env:` set, GITHUB_ACTION_PATH / GITHUB_OUTPUT / GITHUB_ENV /
GITHUB_STEP_SUMMARY provided, through `bash --noprofile --norc -eo pipefail FILE` in the workspace; `if:` conditions
evaluated (an `if:` without a status function means `success() && ...`); `uses:` steps are not run, but their `with:`
is evaluated and checked. The install step runs too, without network: in a fresh venv (its bin first on PATH, as
actions/setup-python leaves it) that sees this environment's packages (torch, setuptools) through a .pth file, with
`pip-args: --no-deps --no-build-isolation --no-index`; pip installs a copy of the project (so the build leaves
nothing in the working tree) and later steps must import that installed copy, not the checkout.

The pair (examples.py, as the demo builds it): a tiny Llama target whose next token depends on the current token only,
an EAGLE-1 head built to agree with it (τ = k+1 exactly), the same head with a real fc bias (the raw head then
accepts less), and a second target of the same shapes with other weights.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from support.gha import REPO, base_env, checkout_action, condition, load_action, run_action, setup_python_venv

from eagle_convert.testing.tiny import (
    TinyConfig,
    eagle1_head_tensors,
    eagle1_release_config,
    make_eagle1_head,
    make_target,
    save_checkpoint,
)

SNIPPET = REPO / "ci" / "eagle-convert.mk"
K, MAX_NEW_TOKENS = 3, 12
CFG = TinyConfig(hidden_size=64, num_hidden_layers=1, vocab_size=256)  # the demo's


# ---------------------------------------------------------------------------------------------------------------
# The tiny pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    tensors = make_target(root / "target", CFG, zero_attention=True)
    make_target(root / "other-target", CFG, seed=7, zero_attention=True)  # same shapes, other weights
    make_eagle1_head(root / "agree", CFG, tensors, agree=True, fc_bias=False)
    biased = eagle1_head_tensors(CFG, tensors, agree=True, fc_bias=True)
    biased["fc.bias"] = torch.randn(CFG.hidden_size, generator=torch.Generator().manual_seed(3)) * 0.5
    save_checkpoint(root / "biased", eagle1_release_config(CFG, fc_bias=True), biased, fmt="bin")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_ids": ids}) + "\n" for ids in ([10, 11, 12], [40, 7, 99, 3])))
    return {"root": root, "target": root / "target", "other": root / "other-target", "agree": root / "agree",
            "biased": root / "biased", "prompts": prompts}


@pytest.fixture(scope="module")
def action_path(tmp_path_factory):
    """A copy of the project, as a workflow's `uses:` checks it out (support.gha.checkout_action)."""
    return checkout_action(tmp_path_factory.mktemp("action") / "eagle-convert")


@pytest.fixture(scope="module")
def setup_python(tmp_path_factory):
    """The bin folder of a fresh venv, as actions/setup-python leaves one (support.gha.setup_python_venv)."""
    return setup_python_venv(tmp_path_factory.mktemp("setup-python") / "venv")


@pytest.fixture(scope="module")
def good_run(pair, action_path, setup_python, tmp_path_factory):
    """The whole Action, install step included, on a correct conversion."""
    workspace = tmp_path_factory.mktemp("ws-good") / "workspace"
    workspace.mkdir()
    inputs = {"draft": str(pair["agree"]), "target": str(pair["target"]), "k": str(K),
              "max-new-tokens": str(MAX_NEW_TOKENS), "prompts": str(pair["prompts"]), "min-acceptance-length": "3.5",
              "report": "reports/bench.json", "pip-args": "--no-deps --no-build-isolation --no-index",
              "bench-args": "--threads 1 --dtype float32"}
    return workspace, run_action(inputs, workspace=workspace, action_path=action_path, path_first=setup_python)


def test_action_is_a_composite_action_with_the_documented_interface():
    action = load_action()
    assert action["runs"]["using"] == "composite"
    inputs = action["inputs"]
    for name in ("draft", "target", "layout", "output", "fc-bias", "reference-draft", "min-acceptance-length",
                 "reference-report", "max-tau-drop", "k", "max-new-tokens", "prompts", "report", "convert-args",
                 "bench-args", "pip-args", "python", "upload"):
        assert name in inputs and inputs[name].get("description"), name
    assert inputs["draft"]["required"] is True and inputs["target"]["required"] is True
    defaults = {name: str(spec.get("default", "")) for name, spec in inputs.items() if name not in ("draft", "target")}
    assert defaults["layout"] == "vllm" and defaults["fc-bias"] == "error" and defaults["reference-draft"] == ""
    assert defaults["report"] == "eagle-convert-report.json" and defaults["python"] == "python3"
    assert defaults["upload"] == "true" and defaults["output"]
    assert {"out", "report", "tau"} <= set(action["outputs"])

    steps = action["runs"]["steps"]
    run_steps = [s for s in steps if "run" in s]
    assert [s["id"] for s in run_steps] == ["install", "convert", "bench"]
    for step in run_steps:
        assert step["shell"] == "bash"
        assert step["run"].lstrip().startswith("set -euo pipefail"), step["id"]
        # script injection: no expression is pasted into a script; every value arrives as an environment variable
        assert "${{" not in step["run"], step["id"]
    assert "$GITHUB_ACTION_PATH" in steps[0]["run"]
    upload = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert len(upload) == 1 and upload[0]["uses"] == "actions/upload-artifact@v4"
    assert "always()" in upload[0]["if"]
    assert upload[0]["with"]["path"] == "${{ steps.bench.outputs.report }}"  # what the bench step wrote
    used = set(re.findall(r"inputs\.([\w-]+)", json.dumps(steps)))
    assert used == set(inputs), f"declared but unused: {set(inputs) - used}; used but undeclared: {used - set(inputs)}"
    # the upload runs after a failed bench, not when disabled, not when bench never started
    context = {"inputs": {"upload": "true"}, "action_path": "", "steps": {"bench": {"report": "/ws/r.json"}}}
    assert condition(upload[0]["if"], context, ok=False) is True
    assert condition(upload[0]["if"], {**context, "inputs": {"upload": "false"}}, ok=True) is False
    assert condition(upload[0]["if"], {**context, "steps": {}}, ok=False) is False


def test_action_converts_benches_and_reports_a_correct_conversion(good_run, pair, setup_python):
    workspace, run = good_run
    assert all(s.ran for s in run.steps.values()), run.log()
    for sid in ("install", "convert", "bench"):
        assert run.steps[sid].returncode == 0, run.log()
    # the install step installed the action's copy into setup-python's interpreter; later steps ran that copy
    where = subprocess.run([str(setup_python / "python3"), "-c", "import eagle_convert; print(eagle_convert.__file__)"],
                           env=base_env(setup_python), capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(setup_python.parent), where
    assert "eagle-convert, version" in run.steps["install"].stdout

    out = workspace / "eagle-converted"
    assert run.outputs["out"] == str(out)
    provenance = json.loads((out / "eagle_convert.json").read_text())
    assert provenance["layout"] == "vllm" and provenance["dropped"] == []

    report_file = workspace / "reports" / "bench.json"
    assert run.outputs["report"] == str(report_file) and report_file.is_file()
    report = json.loads(report_file.read_text())
    acceptance = report["overall"]["acceptance"]
    assert acceptance["mean_acceptance_length"] == K + 1 and acceptance["acceptance_rate"] == 1.0
    assert report["settings"]["k"] == K and report["settings"]["max_new_tokens"] == MAX_NEW_TOKENS
    assert [p["id"] for p in report["prompts"]] == ["1", "2"]  # the prompts file was used
    assert report["lossless"]["identical"] is True
    checks = {c["name"]: c for c in report["gate"]["checks"]}
    assert report["gate"]["passed"] is True and set(checks) == {"reference_draft", "min_acceptance_length"}
    assert checks["reference_draft"]["reference_draft"] == str(pair["agree"])  # default: the raw head itself
    assert checks["reference_draft"]["mode"] == "exact" and checks["reference_draft"]["first_difference"] is None
    assert report["reference"]["overall"]["acceptance"] == acceptance
    assert checks["min_acceptance_length"]["min_acceptance_length"] == 3.5
    assert float(run.outputs["tau"]) == K + 1 and run.outputs["exit-code"] == "0"
    assert "τ = 4.0" in run.summary and "passed" in run.summary

    upload = run.steps["upload"]
    assert upload.ran and upload.with_["if-no-files-found"] == "warn"
    assert upload.with_["path"] == str(report_file)  # uploads exactly the report written


def test_action_fails_a_conversion_that_changes_the_head_and_still_writes_the_report(pair, action_path, setup_python,
                                                                                      good_run, tmp_path):
    """`--fc-bias drop` on a head whose fc bias matters: the converted head loads and even accepts more than the raw
    one here, but it is not the released head; the reference comparison says where it first differs (exit 3)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    inputs = {"draft": str(pair["biased"]), "target": str(pair["target"]), "fc-bias": "drop", "k": str(K),
              "max-new-tokens": str(MAX_NEW_TOKENS), "prompts": str(pair["prompts"]), "install": "false",
              "output": "heads/dropped", "artifact-name": "bench-dropped"}
    run = run_action(inputs, workspace=workspace, action_path=action_path, path_first=setup_python)
    assert not run.steps["install"].ran  # install: false (the package is there from the first run)
    assert run.steps["convert"].returncode == 0, run.log()
    assert "fc bias" in run.steps["convert"].stderr  # convert says it dropped it
    bench = run.steps["bench"]
    assert bench.returncode == 3, run.log()
    assert "does not behave like the head as released" in " ".join(bench.stderr.split())
    assert "::error title=eagle-convert::" in bench.stdout

    report_file = workspace / "eagle-convert-report.json"
    assert report_file.is_file() and run.outputs["report"] == str(report_file)
    report = json.loads(report_file.read_text())
    assert report["gate"]["passed"] is False
    (check,) = report["gate"]["checks"]
    assert check["name"] == "reference_draft" and check["passed"] is False
    assert check["first_difference"]["prompt"] == "1" and check["first_difference"]["round"] == 0
    # a τ floor could not catch it: without its bias this head agrees with the target more than the released one
    assert (check["tau"] > check["reference_tau"]
            == report["reference"]["overall"]["acceptance"]["mean_acceptance_length"])
    assert run.outputs["exit-code"] == "3" and float(run.outputs["tau"]) == report["overall"]["acceptance"][
        "mean_acceptance_length"]
    assert run.outputs["out"] == str(workspace / "heads" / "dropped")

    upload = run.steps["upload"]  # if: always(): the report of a failed gate is uploaded too
    assert upload.ran and upload.with_["path"] == str(report_file)
    assert upload.with_["name"] == "bench-dropped"


def test_action_stops_at_a_refused_conversion(pair, action_path, setup_python, good_run, tmp_path):
    """The default `fc-bias: error` refuses a head with an fc bias for vLLM V1: convert exits 1, bench is skipped,
    and so is the upload: a report an earlier job left in the workspace is not this run's."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "eagle-convert-report.json").write_text("{}")  # a stale report from an earlier job
    inputs = {"draft": str(pair["biased"]), "target": str(pair["target"]), "install": "false"}
    run = run_action(inputs, workspace=workspace, action_path=action_path, path_first=setup_python)
    assert run.steps["convert"].returncode == 1 and "--fc-bias" in run.steps["convert"].stderr, run.log()
    assert not run.steps["bench"].ran and not run.steps["upload"].ran
    assert run.outputs["out"] == "" and run.outputs["report"] == ""
    assert (workspace / "eagle-convert-report.json").read_text() == "{}"
    assert not (workspace / "eagle-converted").exists()


def _fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter stand-in for the `python` input: runs `-c` code with the real one, records every
    `-m pip` / `-m eagle_convert` argv, creates convert's -o folder and writes a small report for bench."""
    log = tmp_path / "argv.jsonl"
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import json, os, sys
        args = sys.argv[1:]
        if args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            exec(compile(args[1], "<string>", "exec"))
            sys.exit(0)
        with open({str(log)!r}, "a") as f:
            f.write(json.dumps(args) + "\\n")
        if args[:2] == ["-m", "eagle_convert"] and args[2] == "convert":
            os.makedirs(args[args.index("-o") + 1], exist_ok=True)
        if args[:2] == ["-m", "eagle_convert"] and args[2] == "bench":
            if not os.environ.get("FAKE_BENCH_NO_REPORT"):
                with open(args[args.index("--report") + 1], "w") as f:
                    json.dump({{"overall": {{"acceptance": {{"mean_acceptance_length": 2.5}}}}}}, f)
            sys.exit(int(os.environ.get("FAKE_BENCH_EXIT", "0")))
        """))
    fake.chmod(0o755)
    return fake, log


def test_action_passes_each_input_as_one_argument(tmp_path, action_path):
    """Every optional input becomes its flag only when set; values with spaces, quotes and shell metacharacters
    arrive as single arguments and are never executed; extra args are split like a shell splits words."""
    fake, log = _fake_python(tmp_path)
    workspace = tmp_path / "work space"
    workspace.mkdir()
    canary = tmp_path / "pwned"
    draft = f"my draft's $(touch {canary}) `touch {canary}` dir"
    inputs = {"draft": draft, "target": "tar get", "layout": "sglang", "output": "out dir", "fc-bias": "fold",
              "reference-draft": "raw head", "min-acceptance-length": "1.8", "reference-report": "stored.json",
              "max-tau-drop": "0.1", "k": "4", "max-new-tokens": "32", "prompts": "p q.jsonl", "report": "r/r e.json",
              "convert-args": "--dtype bfloat16 --drop 'x *'", "bench-args": "--threads 2 --seed \"7\"",
              "pip-args": "--no-index --find-links 'wheel house'", "python": str(fake)}
    run = run_action(inputs, workspace=workspace, action_path=action_path, path_first=None)
    assert all(run.steps[s].returncode == 0 for s in ("install", "convert", "bench")), run.log()
    assert not canary.exists()
    pip, version, convert, bench = (json.loads(line) for line in log.read_text().splitlines())
    assert pip == ["-m", "pip", "install", "--no-index", "--find-links", "wheel house", str(action_path)]
    assert version == ["-m", "eagle_convert", "--version"]
    assert convert == ["-m", "eagle_convert", "convert", draft, "--target", "tar get", "-o", "out dir",
                       "--to", "sglang", "--fc-bias", "fold", "--force", "--quiet", "--dtype", "bfloat16",
                       "--drop", "x *"]
    assert bench == ["-m", "eagle_convert", "bench", "--target", "tar get", "--draft", str(workspace / "out dir"),
                     "--report", "r/r e.json", "--quiet", "--reference-draft", "raw head",
                     "--min-acceptance-length", "1.8", "--reference-report", "stored.json", "--max-tau-drop", "0.1",
                     "-k", "4", "--max-new-tokens", "32", "--prompts", "p q.jsonl", "--threads", "2", "--seed", "7"]
    assert run.outputs == {"out": str(workspace / "out dir"), "report": str(workspace / "r" / "r e.json"),
                           "tau": "2.5", "exit-code": "0"}

    # the defaults: no optional flag at all, the raw head as the reference; `reference-draft: none` drops it
    for reference, expected in (("", ["--reference-draft", "d"]), ("none", [])):
        log.unlink()
        ws = tmp_path / f"ws-{reference or 'default'}"
        ws.mkdir()
        run = run_action({"draft": "d", "target": "t", "python": str(fake), "reference-draft": reference},
                         workspace=ws, action_path=action_path, path_first=None)
        pip, _, convert, bench = (json.loads(line) for line in log.read_text().splitlines())
        assert pip == ["-m", "pip", "install", str(action_path)]
        assert convert == ["-m", "eagle_convert", "convert", "d", "--target", "t", "-o", "eagle-converted",
                           "--to", "vllm", "--fc-bias", "error", "--force", "--quiet"]
        assert bench == ["-m", "eagle_convert", "bench", "--target", "t", "--draft", str(ws / "eagle-converted"),
                         "--report", "eagle-convert-report.json", "--quiet", *expected]


def test_action_step_fails_with_benchs_exit_code_after_writing_its_outputs(tmp_path, action_path, monkeypatch):
    fake, _ = _fake_python(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "eagle-convert-report.json").write_text("stale")
    monkeypatch.setenv("FAKE_BENCH_EXIT", "1")  # bench fails before writing a report
    monkeypatch.setenv("FAKE_BENCH_NO_REPORT", "1")
    run = run_action({"draft": "d", "target": "t", "python": str(fake), "install": "false"}, workspace=workspace,
                     action_path=action_path, path_first=None)
    assert run.steps["bench"].returncode == 1 and run.outputs["exit-code"] == "1" and run.outputs["tau"] == ""
    assert not (workspace / "eagle-convert-report.json").exists()  # the stale one was removed, not uploaded
    assert run.steps["upload"].ran and "::error" not in run.steps["bench"].stdout
    monkeypatch.setenv("FAKE_BENCH_EXIT", "3")
    monkeypatch.delenv("FAKE_BENCH_NO_REPORT")
    run = run_action({"draft": "d", "target": "t", "python": str(fake), "install": "false", "upload": "false"},
                     workspace=workspace, action_path=action_path, path_first=None)
    assert run.steps["bench"].returncode == 3 and run.outputs["exit-code"] == "3" and run.outputs["tau"] == "2.5"
    assert not run.steps["upload"].ran and "FAILED (exit 3)" in run.summary


# ---------------------------------------------------------------------------------------------------------------
# The Makefile snippet


needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args: str, cwd: Path, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, env=base_env() | (extra_env or {}),
                          capture_output=True, text=True, timeout=300)


EAGLE_CONVERT = str(Path(sys.executable).with_name("eagle-convert"))


@needs_make
def test_snippet_gate_passes_a_correct_conversion(pair, tmp_path):
    result = make("-f", str(SNIPPET), "gate", f"EAGLE_DRAFT={pair['agree']}", f"EAGLE_TARGET={pair['target']}",
                  f"EAGLE_CONVERT={EAGLE_CONVERT}", f"EAGLE_K={K}", f"EAGLE_MAX_NEW_TOKENS={MAX_NEW_TOKENS}",
                  f"EAGLE_PROMPTS={pair['prompts']}", "EAGLE_MIN_TAU=3.5", "EAGLE_OUT=out/head",
                  "EAGLE_REPORT=out/report.json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "out" / "head" / "eagle_convert.json").read_text())["layout"] == "vllm"
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["overall"]["acceptance"]["mean_acceptance_length"] == K + 1
    assert report["gate"]["passed"] is True
    assert {c["name"] for c in report["gate"]["checks"]} == {"reference_draft", "min_acceptance_length"}
    assert report["reference"]["overall"]["acceptance"] == report["overall"]["acceptance"]
    assert result.stdout.count(f"{EAGLE_CONVERT} convert") == 1 and f"{EAGLE_CONVERT} bench" in result.stdout


@needs_make
def test_snippet_gate_fails_a_head_that_does_not_fit_its_target(pair, tmp_path):
    """The head converted for another model of the same shapes: everything loads, τ collapses to 1 (raw and
    converted alike, so the reference comparison passes) and the τ floor fails it: make reports bench's exit 3."""
    result = make("-f", str(SNIPPET), "gate", f"EAGLE_DRAFT={pair['agree']}", f"EAGLE_TARGET={pair['other']}",
                  f"EAGLE_CONVERT={EAGLE_CONVERT}", f"EAGLE_K={K}", f"EAGLE_MAX_NEW_TOKENS={MAX_NEW_TOKENS}",
                  f"EAGLE_PROMPTS={pair['prompts']}", "EAGLE_MIN_TAU=1.3", cwd=tmp_path)
    assert result.returncode == 2 and "Error 3" in result.stderr, result.stdout + result.stderr
    report = json.loads((tmp_path / "eagle-convert-report.json").read_text())
    assert report["overall"]["acceptance"]["mean_acceptance_length"] < 1.3
    checks = {c["name"]: c["passed"] for c in report["gate"]["checks"]}
    assert checks == {"reference_draft": True, "min_acceptance_length": False}
    assert "below --min-acceptance-length" in " ".join(result.stderr.split())


@needs_make
def test_snippet_requires_draft_and_target(tmp_path):
    marker = tmp_path / "ran"
    for target, args, missing in (("gate", ["EAGLE_TARGET=t"], "EAGLE_DRAFT"),
                                  ("convert", ["EAGLE_DRAFT=d"], "EAGLE_TARGET")):
        result = make("-f", str(SNIPPET), target, *args, f"EAGLE_CONVERT=touch {marker}", cwd=tmp_path)
        assert result.returncode == 2
        assert f"{missing} is not set" in result.stderr and "EAGLE_DRAFT=path/to/eagle-head" in result.stderr
        assert not marker.exists() and result.stdout == ""


def _recorder(tmp_path: Path) -> tuple[str, Path]:
    log = tmp_path / "argv.jsonl"
    script = tmp_path / "record.py"
    script.write_text(f"import json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    return f"{sys.executable} {script}", log


@needs_make
def test_snippet_quotes_values_and_adds_only_the_flags_set(tmp_path):
    command, log = _recorder(tmp_path)
    canary = tmp_path / "pwned"
    draft = f"my draft's `touch {canary}`; dir"  # make's own `$` is make syntax ($$ in values), as everywhere in make
    result = make("-f", str(SNIPPET), "gate", f"EAGLE_DRAFT={draft}", "EAGLE_TARGET=tar get", "EAGLE_LAYOUT=sglang",
                  "EAGLE_OUT=out dir", "EAGLE_FC_BIAS=fold", "EAGLE_REFERENCE=raw head", "EAGLE_REPORT=r e.json",
                  "EAGLE_MIN_TAU=1.8", "EAGLE_REFERENCE_REPORT=stored.json", "EAGLE_MAX_TAU_DROP=0.1", "EAGLE_K=4",
                  "EAGLE_MAX_NEW_TOKENS=32", "EAGLE_PROMPTS=p q.jsonl", "EAGLE_CONVERT_ARGS=--dtype bfloat16",
                  "EAGLE_BENCH_ARGS=--threads 2", f"EAGLE_CONVERT={command}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not canary.exists()
    convert, bench = (json.loads(line) for line in log.read_text().splitlines())
    assert convert == ["convert", draft, "--target", "tar get", "-o", "out dir", "--to", "sglang", "--fc-bias", "fold",
                       "--force", "--quiet", "--dtype", "bfloat16"]
    assert bench == ["bench", "--target", "tar get", "--draft", "out dir", "--report", "r e.json", "--quiet",
                     "--reference-draft", "raw head", "--min-acceptance-length", "1.8", "--reference-report",
                     "stored.json", "--max-tau-drop", "0.1", "-k", "4", "--max-new-tokens", "32", "--prompts",
                     "p q.jsonl", "--threads", "2"]

    for reference, expected in ((None, ["--reference-draft", "d"]), ("none", [])):
        log.unlink()
        args = ["EAGLE_DRAFT=d", "EAGLE_TARGET=t", f"EAGLE_CONVERT={command}"]
        result = make("-f", str(SNIPPET), *args, *([f"EAGLE_REFERENCE={reference}"] if reference else []),
                      cwd=tmp_path)  # no goal: standalone, `gate` is the default
        assert result.returncode == 0, result.stderr
        convert, bench = (json.loads(line) for line in log.read_text().splitlines())
        assert convert == ["convert", "d", "--target", "t", "-o", "eagle-converted", "--to", "vllm", "--fc-bias",
                           "error", "--force", "--quiet"]
        assert bench == ["bench", "--target", "t", "--draft", "eagle-converted", "--report",
                         "eagle-convert-report.json", "--quiet", *expected]


@needs_make
def test_snippet_included_keeps_the_includers_default_goal_and_variables(tmp_path):
    command, log = _recorder(tmp_path)
    (tmp_path / "Makefile").write_text(
        f"EAGLE_DRAFT = heads/raw  # trailing spaces and a comment, as people write them\n"
        f"EAGLE_TARGET = models/target\nEAGLE_LAYOUT = speculators\nEAGLE_CONVERT = {command}\n"
        f"include {SNIPPET}\n\nall:\n\t@echo built\n")
    default = make(cwd=tmp_path)
    assert default.returncode == 0 and default.stdout.strip() == "built" and not log.exists()
    gate = make("gate", "EAGLE_K=5", cwd=tmp_path)
    assert gate.returncode == 0, gate.stderr
    convert, bench = (json.loads(line) for line in log.read_text().splitlines())
    assert convert[:7] == ["convert", "heads/raw", "--target", "models/target", "-o", "eagle-converted", "--to"]
    assert convert[7] == "speculators"
    assert bench[-4:] == ["--reference-draft", "heads/raw", "-k", "5"]
