"""The stored-report fuzz family (issue 33): `bench --reference-report FILE`, where FILE is a `bench --json` report of
the same settings and prompts (made once per fuzz by the bounded runner), damaged: any value replaced (NaN, infinity,
huge, negative, wrong types) or deleted, histograms and prompt lists of other lengths, the JSON cut short, nested, not
an object, not UTF-8, empty. (The context bench's `--documents` are fuzzed with the other texts: fuzz_texts.py.)

The oracle: a refusal as every family's; or a gate verdict (exit 0 or 3) whose report is plausible (no NaN or
infinity anywhere, τ within [1, k+1]: support/fuzz_pair.plausible_bench); the undamaged report must pass (exit 0)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from support.fuzz_bounded import run_cli
from support.fuzz_family import Family, Run
from support.fuzz_pair import Pair, bench_args, build_pair, plausible_bench

ODD = [float("nan"), float("inf"), -float("inf"), 1e308, -1, 0, 10**30, "1", None, [], {}, True, [1, 2, 3]]


@dataclass(frozen=True)
class ReportFixtures:
    pair: Pair
    report: dict  # bench --json of the fuzzed settings on pair.prompts


def build(root: Path) -> ReportFixtures:
    pair = build_pair(root)
    outcome = run_cli(bench_args(pair, "--prompts", str(pair.prompts)))
    assert outcome.exit_code == 0, f"the stored report's bench failed: {outcome.stderr}"
    return ReportFixtures(pair, json.loads(outcome.stdout))


def command(fx: ReportFixtures, path: Path, what: str, must_succeed: bool = False) -> Run:
    def judge(outcome) -> str | None:
        if outcome.exit_code not in (0, 3):
            return f"exit {outcome.exit_code}: {outcome.stderr[-300:]!r}"
        if must_succeed and outcome.exit_code != 0:
            return f"the undamaged report fails its own gate: {outcome.stderr[-300:]!r}"
        return plausible_bench(outcome.stdout)

    argv = bench_args(fx.pair, "--prompts", str(fx.pair.prompts), "--reference-report", str(path),
                      "--max-tau-drop", "0.05")
    return Run(f"{path.name}: {what}", argv, [path, fx.pair.target, fx.pair.head, fx.pair.prompts], [], judge,
               must_succeed=must_succeed)


def slots(value, where: str = ""):
    """(container, key, dotted path) of every value inside a JSON value."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        path = f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]"
        yield value, key, path
        yield from slots(item, path)


def write(folder: Path, data: bytes | str) -> Path:
    path = folder / "stored.json"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def undamaged(rng, fx: ReportFixtures, folder: Path) -> Run:
    return command(fx, write(folder, json.dumps(fx.report)), "undamaged", must_succeed=True)


def value(rng, fx: ReportFixtures, folder: Path) -> Run:
    report = json.loads(json.dumps(fx.report))
    pool = list(slots(report))
    focus = [s for s in pool if any(w in s[2] for w in ("acceptance", "settings", "prompts"))]
    container, key, where = rng.choice(focus if rng.random() < 0.8 else pool)
    if rng.random() < 0.2 and isinstance(container, dict):
        del container[key]
        what = f"{where} deleted"
    else:
        container[key] = rng.choice(ODD)
        what = f"{where} = {container[key]!r:.30}"
    return command(fx, write(folder, json.dumps(report)), what)


def lengths(rng, fx: ReportFixtures, folder: Path) -> Run:
    report = json.loads(json.dumps(fx.report))
    lists = [(c, k, w) for c, k, w in slots(report) if isinstance(c[k], list) and
             any(x in w for x in ("histogram", "prompts", "per_position_rates", "prompt_ids_sha256"))]
    container, key, where = rng.choice(lists)
    how = rng.choice(["empty", "longer", "shorter", "doubled"])
    items = container[key]
    container[key] = {"empty": [], "longer": items + items[-1:], "shorter": items[:-1], "doubled": items * 2}[how]
    return command(fx, write(folder, json.dumps(report)), f"{where} {how}")


def document(rng, fx: ReportFixtures, folder: Path) -> Run:
    text = json.dumps(fx.report)
    how = rng.choice(["cut", "empty", "not an object", "nested", "utf-16", "invalid byte"])
    data = {"cut": lambda: text[:rng.randrange(len(text))], "empty": lambda: "",
            "not an object": lambda: rng.choice(["[]", "1", '"x"', "null"]),
            "nested": lambda: '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "utf-16": lambda: text.encode("utf-16"), "invalid byte": lambda: b"\xff" + text.encode()}[how]()
    return command(fx, write(folder, data), how)


def nan_tau(rng, fx: ReportFixtures, folder: Path) -> Run:
    """The stored τ as NaN or infinity (json writes them as bare words): every comparison with it is false."""
    report = json.loads(json.dumps(fx.report))
    word = rng.choice(["NaN", "Infinity", "-Infinity", "1e999"])
    text = json.dumps(report).replace('"mean_acceptance_length": 3.0', f'"mean_acceptance_length": {word}')
    return command(fx, write(folder, text), f"stored τ {word}")


MUTATIONS = {"undamaged": undamaged, "value": value, "lengths": lengths, "document": document, "nan-tau": nan_tau}
FAMILY = Family("reports", build, MUTATIONS, {"undamaged": 0.5, "value": 3, "nan-tau": 0.5})


# ---- the seeds: what this family found (fixed here: benchmark/api.py reads a report with finite numbers only) -------
def seed_nan(rng, fx: ReportFixtures, folder: Path) -> Run:
    text = json.dumps(fx.report).replace('"mean_acceptance_length": 3.0', '"mean_acceptance_length": NaN')
    return command(fx, write(folder, text), "stored τ NaN (the gate passed: every comparison with NaN is false)")


def seed_nested(rng, fx: ReportFixtures, folder: Path) -> Run:
    return command(fx, write(folder, '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"), "nested 100000 deep")


def seed_edit(where: str, value):
    """One field of the stored report replaced (`where`: the path of keys and indexes to it)."""
    def run(rng, fx: ReportFixtures, folder: Path) -> Run:
        report = json.loads(json.dumps(fx.report))
        *parents, last = where
        container = report
        for key in parents:
            container = container[key]
        container[last] = value
        return command(fx, write(folder, json.dumps(report)), f"{where} = {value!r} (once a traceback)")
    return run


SEEDS = {"stored report with a NaN τ": seed_nan, "stored report nested 100000 deep": seed_nested,
         "stored report without overall τ": seed_edit(("overall", "acceptance"), {}),
         "stored report with a category {}": seed_edit(("prompts", 0, "category"), {}),
         "stored report with a prompt None": seed_edit(("prompts", 1), None)}
