"""Progress on stderr for the long commands, `--json` included: stdout parses as JSON alone and stderr has the
progress lines (plain lines on a pipe; EAGLE_CONVERT_PROGRESS_EVERY=0 makes one per step so the tests see them)."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner

from eagle_convert.cli.main import main
from eagle_convert.io.progress import EVERY_ENV, Progress, tracked
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

CFG = TinyConfig(num_hidden_layers=1)
PROMPTS = ['{"prompt": "t10 t11 t12"}', '{"prompt": "t40 t7"}']


@pytest.fixture
def every_step(monkeypatch):
    monkeypatch.setenv(EVERY_ENV, "0")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress-pair")
    tensors = make_target(root / "target", CFG, zero_attention=True)
    make_eagle1_head(root / "head", CFG, tensors, agree=True, fc_bias=False)
    (root / "p.jsonl").write_text("\n".join(PROMPTS) + "\n")
    return root


def cli(*args):
    return CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)


def progress_lines(stderr: str, what: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"{what}: ")]


# ---- the plain lines a pipe gets ------------------------------------------------------------------------------------

def test_a_pipe_gets_one_line_per_step_and_a_last_one_at_interval_zero(every_step):
    stream = io.StringIO()
    with Progress("work", 3, "item", stream=stream) as shown:
        for n in range(3):
            shown.note(tau=f"{n}.00")
            shown.update()
    lines = stream.getvalue().splitlines()
    assert [line.rsplit(" (", 1)[0] for line in lines] == [
        "work: at 1/3 items, tau 0.00", "work: at 2/3 items, tau 1.00", "work: done 3/3 items, tau 2.00"]
    assert "\r" not in stream.getvalue()  # no carriage returns in a log


def test_work_done_within_the_interval_says_nothing_and_disabled_says_nothing(every_step, monkeypatch):
    stream = io.StringIO()
    with Progress("off", 2, "item", enabled=False, stream=stream) as shown:
        shown.update(2)
    monkeypatch.setenv(EVERY_ENV, "3600")
    with Progress("quick", 2, "item", stream=stream) as shown:
        shown.update(2)
    assert stream.getvalue() == ""
    assert list(tracked([1, 2], "x", "item", enabled=False)) == [1, 2]


# ---- every long command, under --json ------------------------------------------------------------------------------

def test_bench_json_keeps_stdout_pure_and_reports_progress_on_stderr(pair, every_step):
    run = cli("bench", "-t", pair / "target", "-d", pair / "head", "--prompts", pair / "p.jsonl", "-k", "2",
              "--max-new-tokens", "4", "--reference-draft", pair / "head", "--json")
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)["overall"]["acceptance"]["mean_acceptance_length"] == 3.0
    assert progress_lines(run.stderr, "bench")[-1].startswith("bench: done 2/2 prompts, tau 3.00")
    assert progress_lines(run.stderr, "baseline (plain decoding)")[-1].startswith(
        "baseline (plain decoding): done 2/2 prompts")
    assert progress_lines(run.stderr, "bench (reference draft)")


def test_quiet_turns_progress_off(pair, every_step):
    run = cli("bench", "-t", pair / "target", "-d", pair / "head", "--prompts", pair / "p.jsonl", "-k", "2",
              "--max-new-tokens", "4", "--json", "-q")
    assert run.exit_code == 0 and json.loads(run.stdout) and run.stderr == ""


def test_context_lengths_json_reports_progress(pair, every_step, tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": " ".join(f"t{3 + (n * 7 + d) % 200}" for n in range(300))}) + "\n"
                            for d in range(2)))
    run = cli("bench", "-t", pair / "target", "-d", pair / "head", "--context-lengths", "100,200", "--documents",
              docs, "--documents-per-bucket", "1", "-k", "2", "--max-new-tokens", "4", "--no-baseline", "--json")
    assert run.exit_code == 0, run.stderr
    assert len(json.loads(run.stdout)["context"]["buckets"]) == 2
    assert progress_lines(run.stderr, "bench")[-1].startswith("bench: done 2/2 prompts")


def test_tree_sweep_reports_a_step_per_shape(pair, every_step, capsys):
    from eagle_convert.benchmark.sweep import run_sweep, sweep_shapes

    shapes = sweep_shapes()[:2]
    run_sweep(str(pair / "target"), str(pair / "head"), k=2, prompts=[PROMPTS[0][12:-2]], num_prompts=1,
              shapes=shapes, max_new_tokens=4, progress=True)
    lines = progress_lines(capsys.readouterr().err, "tree sweep")
    assert lines[-1].startswith("tree sweep: done 3/3 shapes") and len(lines) == 3


def test_convert_json_reports_tensors_written(pair, every_step, tmp_path):
    run = cli("convert", pair / "head", "-t", pair / "target", "-o", tmp_path / "out", "--to", "vllm", "--json")
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)
    assert progress_lines(run.stderr, "writing tensors")[-1].startswith("writing tensors: done")


def test_vocab_map_build_and_coverage_json_report_progress(pair, every_step, tmp_path):
    chats = tmp_path / "chats.jsonl"
    chats.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"t{10 + n} t11"},
                                                      {"role": "assistant", "content": f"t{20 + n} t21"}]}) + "\n"
                             for n in range(3)))
    build = cli("vocab-map", "build", "-t", pair / "target", "--prompts", chats, "-n", "8", "--compat",
                "speculators", "-o", tmp_path / "maps", "--cache-dir", tmp_path / "cache", "--json")
    assert build.exit_code == 0, build.stderr
    assert json.loads(build.stdout)
    assert progress_lines(build.stderr, "counting tokens (speculators)")[-1].startswith(
        "counting tokens (speculators): done 3/3 conversations")
    cover = cli("vocab-map", "coverage", "-t", pair / "target", "--prompts", chats, "--head", pair / "head",
                "--max-new-tokens", "4", "--json")
    assert cover.exit_code == 0, cover.stderr
    assert json.loads(cover.stdout)
    assert progress_lines(cover.stderr, "greedy stream")[-1].startswith("greedy stream: done 3/3 prompts")


def test_convert_mtp_json_reports_tensors_written(every_step, tmp_path):
    from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target

    build_mtp_target(tmp_path / "mimo", MtpFixture("mimo"))
    run = cli("convert", "--mtp", tmp_path / "mimo", "-o", tmp_path / "out", "--json")
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)
    assert progress_lines(run.stderr, "writing tensors")[-1].startswith("writing tensors: done 16/16 tensors")
