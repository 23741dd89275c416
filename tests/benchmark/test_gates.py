"""`bench --reference-draft`: every deliberate mistake of docs/benchmarks.md (and the EAGLE-3 ones) exits 3, every
correct conversion of the same heads, to every layout and with `--fc-bias fold`, exits 0; on a pair built to give
partial acceptance, so a mistake has acceptance to change. `--reference-report`: a stored report, per category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import eagle_convert
from eagle_convert.benchmark import gates
from eagle_convert.cli.main import main
from eagle_convert.errors import IncomparableReportError
from eagle_convert.testing.gate_mistakes import CORRECT, MISTAKES, edit_config, edit_tensors, permute_lm_head
from eagle_convert.testing.vllm_pairs import build_releases

K, TOKENS = 3, 24


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    return build_releases(tmp_path_factory.mktemp("gates"))


def cli(*args):
    """The real command, in this process (CliRunner keeps exit code, stdout and stderr apart): a subprocess per case
    would pay for importing torch 16 times. tests/benchmark/test_bench_cli.py runs the installed command itself."""
    result = CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)
    result.returncode = result.exit_code
    return result


def bench_cli(releases, draft, reference, *extra):
    return cli("bench", "-t", releases["target"], "-d", draft, "--reference-draft", reference, "-k", K,
               "--max-new-tokens", TOKENS, "--prompts", releases["prompts"], "--no-baseline", "--json", "-q", *extra)


def converted(releases, tmp_path, kind, to, **options) -> Path:
    out = tmp_path / f"{kind}-{to}"
    eagle_convert.convert(str(releases[kind]), str(releases["target"]), out, to=to, dtype="float32", **options)
    return out


@pytest.mark.parametrize("kind,to,options", CORRECT, ids=[f"{k}-{t}{'-' + '-'.join(o.values()) if o else ''}"
                                                           for k, t, o in CORRECT])
def test_a_correct_conversion_passes(releases, tmp_path, kind, to, options):
    out = converted(releases, tmp_path, kind, to, **options)
    proc = bench_cli(releases, out, releases[kind])
    assert proc.returncode == 0, proc.stderr
    check = json.loads(proc.stdout)["gate"]["checks"][0]
    assert check["name"] == "reference_draft" and check["mode"] == "exact" and check["first_difference"] is None
    assert check["tau"] == check["reference_tau"] and 1.3 < check["tau"] < K + 1  # partial acceptance, as built


@pytest.mark.parametrize("name,kind,to,options,tensors,config", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_every_deliberate_mistake_exits_3(releases, tmp_path, name, kind, to, options, tensors, config):
    out = converted(releases, tmp_path, kind, to, **options)
    if tensors:
        edit_tensors(out, tensors)
    if config:
        edit_config(out, config)
    proc = bench_cli(releases, out, releases[kind], "--report", tmp_path / "report.json")
    assert proc.returncode == 3, proc.stderr
    check = json.loads(proc.stdout)["gate"]["checks"][0]
    assert check["passed"] is False and check["first_difference"]["prompt"] in {"0", "1", "2"}
    assert json.loads((tmp_path / "report.json").read_text())["gate"] == json.loads(proc.stdout)["gate"]
    first = check["first_difference"]
    message = " ".join(proc.stderr.split())
    assert f"prompt '{first['prompt']}', turn {first['turn']}, round {first['round']}" in message


def test_a_dropped_fc_bias_keeps_tau_but_not_the_drafts(releases, tmp_path):
    """Why the gate compares drafts and rounds, not τ: on this pair the dropped bias changes drafts (first past a
    rejection, where τ cannot see it) and moves rounds in both directions, for a τ that differs by 0.014."""
    out = converted(releases, tmp_path, "eagle1", "vllm", fc_bias="drop")
    report = eagle_convert.bench(str(releases["target"]), str(out), k=K, max_new_tokens=TOKENS,
                                 prompts=str(releases["prompts"]), baseline=False,
                                 reference_draft=str(releases["eagle1"]))
    check = report.gates[0]
    assert not check.passed
    first = check.details["first_difference"]
    assert first["drafted"][first["draft_step"]] != first["reference_drafted"][first["draft_step"]]
    assert first["margin"] > 0 and first["reference_margin"] > 0


def test_half_precision_compares_tau_within_the_tolerance(releases, tmp_path):
    out = converted(releases, tmp_path, "eagle1", "vllm", fc_bias="fold")
    report = eagle_convert.bench(str(releases["target"]), str(out), k=K, max_new_tokens=TOKENS, dtype="bfloat16",
                                 prompts=str(releases["prompts"]), baseline=False,
                                 reference_draft=str(releases["eagle1"]))
    check = report.gates[0]
    tolerance, error = gates.tau_tolerance(report, report.reference)
    assert check.details["mode"] == "tau_tolerance" and check.details["tolerance"] == tolerance
    assert tolerance == max(gates.MIN_TAU_TOLERANCE, gates.Z_SCORE * error) and 0 < error < 1
    assert check.passed == (abs(check.details["tau"] - check.details["reference_tau"]) <= tolerance)
    assert check.passed


def test_the_tolerance_is_the_standard_error_of_the_difference():
    """τ = 1 + mean of per-round accepted counts: the tolerance is Z standard errors of the difference of two means."""
    from types import SimpleNamespace

    def run(*rounds):
        return SimpleNamespace(prompts=[SimpleNamespace(accepted_per_turn=[list(rounds)])])

    a, b = run(0, 1, 2, 3), run(1, 1, 1, 1)  # variances 5/3 and 0
    tolerance, error = gates.tau_tolerance(a, b)
    assert error == pytest.approx((5 / 3 / 4) ** 0.5) and tolerance == pytest.approx(gates.Z_SCORE * error)
    assert gates.tau_tolerance(run(*[1] * 1000), run(*[1] * 1000)) == (gates.MIN_TAU_TOLERANCE, 0.0)


def _stored(releases, draft, path: Path, **options) -> dict:
    report = eagle_convert.bench(str(releases["target"]), str(draft), k=K, max_new_tokens=TOKENS,
                                 prompts=str(path), baseline=False, **options)
    return report


def test_reference_report_per_category(releases, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    ids = [json.loads(line)["prompt_ids"] for line in releases["prompts"].read_text().splitlines()]
    prompts.write_text("".join(json.dumps({"id": i, "category": "a" if i < 2 else "b", "prompt_ids": p}) + "\n"
                               for i, p in enumerate(ids)))
    good = converted(releases, tmp_path, "eagle1", "vllm-v0")
    stored = _stored(releases, good, prompts).to_dict()
    (tmp_path / "stored.json").write_text(json.dumps(stored))
    same = _stored(releases, good, prompts, reference_report=str(tmp_path / "stored.json"), max_tau_drop=0.0)
    table = same.gates[0].details["categories"]
    assert same.passed and set(table) == {"overall", "a", "b"} and all(r["drop"] == 0 for r in table.values())

    # A stored category that accepted more than this run: only that category has dropped.
    b = next(p for p in stored["prompts"] if p["category"] == "b")
    hist = b["acceptance"]["histogram"]
    b["acceptance"]["histogram"] = [0] * K + [sum(hist)]  # every round of "b" fully accepted before
    (tmp_path / "better.json").write_text(json.dumps(stored))
    report = _stored(releases, good, prompts, reference_report=str(tmp_path / "better.json"), max_tau_drop=0.05)
    check = report.gates[0]
    assert not report.passed and check.details["categories"]["b"]["drop"] > 0.05
    assert check.details["categories"]["a"]["drop"] == 0 and "b " in check.message

    wrong = tmp_path / "wrong"
    eagle_convert.convert(str(releases["eagle1"]), str(releases["target"]), wrong, to="vllm-v0", dtype="float32")
    edit_tensors(wrong, permute_lm_head)
    proc = cli("bench", "-t", releases["target"], "-d", wrong, "-k", K, "--max-new-tokens", TOKENS, "--prompts",
               prompts, "--no-baseline", "-q", "--reference-report", tmp_path / "stored.json", "--max-tau-drop", "0.1")
    assert proc.returncode == 3 and "dropped by more than --max-tau-drop 0.1" in " ".join(proc.stderr.split())


def test_a_report_of_other_settings_is_refused(releases, tmp_path):
    good = converted(releases, tmp_path, "eagle1", "vllm-v0")
    stored = _stored(releases, good, releases["prompts"]).to_dict()
    (tmp_path / "stored.json").write_text(json.dumps(stored))
    proc = cli("bench", "-t", releases["target"], "-d", good, "-k", K + 1, "--max-new-tokens", TOKENS, "--prompts",
               releases["prompts"], "--no-baseline", "-q", "--reference-report", tmp_path / "stored.json")
    assert proc.returncode == 1 and "other settings: k 3 (now 4)" in " ".join(proc.stderr.split())
    stored["prompts"][1]["prompt_ids_sha256"][0] = "0" * 64
    with pytest.raises(IncomparableReportError, match="tokenizes differently"):
        gates.check_comparable(_stored(releases, good, releases["prompts"]).to_dict(), stored, "x.json")


def test_norm_before_residual_is_benched_but_not_converted(releases, tmp_path):
    """bench runs a head flagged `norm_before_residual: true` as vLLM would (so the flipped flag above is a lower-τ
    head, not a crash); convert writes it where vLLM reads it and refuses SGLang, which cannot express it (issue 12),
    and inspect says so."""
    head = tmp_path / "flagged"
    head.mkdir()
    for f in releases["eagle3"].iterdir():
        (head / f.name).write_bytes(f.read_bytes())
    edit_config(head, lambda c: c.update(norm_before_residual=True))
    with pytest.raises(eagle_convert.errors.UnsupportedConversionError, match="no norm_before_residual flag"):
        eagle_convert.convert(str(head), str(releases["target"]), tmp_path / "out", to="sglang")
    assert not (tmp_path / "out").exists()
    eagle_convert.convert(str(head), str(releases["target"]), tmp_path / "vllm", to="vllm")
    assert json.loads((tmp_path / "vllm" / "config.json").read_text())["norm_before_residual"] is True
    problems = eagle_convert.inspect(str(head), str(releases["target"])).problems
    assert any("norm_before_residual" in p.what for p in problems)
    report = eagle_convert.bench(str(releases["target"]), str(head), k=K, max_new_tokens=TOKENS, baseline=False,
                                 prompts=str(releases["prompts"]), reference_draft=str(releases["eagle3"]))
    assert report.settings["draft_kind"] == "eagle3" and not report.passed


def test_a_cast_conversion_is_compared_exactly_against_the_rounded_release(releases, tmp_path):
    """A float32 release converted to bfloat16: the reference is rounded as the conversion stores it, so a correct
    cast still matches draft for draft and round for round."""
    out = tmp_path / "e3-bf16"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="vllm", dtype="bfloat16")
    report = eagle_convert.bench(str(releases["target"]), str(out), k=K, max_new_tokens=TOKENS, baseline=False,
                                 prompts=str(releases["prompts"]), reference_draft=str(releases["eagle3"]))
    check = report.gates[0]
    assert check.passed and check.details["mode"] == "exact" and check.details["not_exact_because"] is None


@pytest.mark.parametrize("to,options,because", [("vllm-v0", {}, "(spliced from the target) is stored in "
                                                 "bfloat16, narrower than the target's float32"),
                                                ("vllm", {"fc_bias": "fold"}, "folded into a bfloat16 embedding")])
def test_what_cannot_match_exactly_is_compared_within_the_tolerance_and_says_why(releases, tmp_path, to, options,
                                                                                 because):
    out = tmp_path / "e1-bf16"
    eagle_convert.convert(str(releases["eagle1"]), str(releases["target"]), out, to=to, dtype="bfloat16", **options)
    report = eagle_convert.bench(str(releases["target"]), str(out), k=K, max_new_tokens=TOKENS, baseline=False,
                                 prompts=str(releases["prompts"]), reference_draft=str(releases["eagle1"]))
    check = report.gates[0]
    assert check.details["mode"] == "tau_tolerance" and because in check.details["not_exact_because"]
    assert because in check.message and check.passed
