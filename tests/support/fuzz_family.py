"""One fuzzing loop for every input surface (issue 33): a family builds its fixtures once, then each run damages one
input in a fresh folder and names the command that reads it; the run goes through the bounded runner
(support/fuzz_bounded.py) and passes when either
- it is refused: exit 1, one paragraph on stderr starting "error: ", no traceback, nothing written (none of the run's
  output paths exists, no staging folder beside one), every input byte-identical, within the time and memory bound;
- or it succeeds faithfully: the family's own judge says the result is what the source bytes say (a map equal to
  the file's ids, a report whose values are plausible and whose inputs were read as their bytes say).

Run i of a family uses its own generator (seed, family, i), so `only=i` replays it; a family's named mutations can
also be run one by one (the seeds: the cases of issue 29)."""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from support.fuzz_bounded import DEFAULT_MEMORY, DEFAULT_SECONDS, Outcome, run_cli


@dataclass
class Run:
    """One damaged input and the command that reads it."""
    what: str
    argv: list[str]
    inputs: list[Path]  # files and folders that must be unchanged afterwards
    outputs: list[Path] = field(default_factory=list)  # paths a refusal must not leave behind
    judge: Callable[[Outcome], str | None] | None = None  # a run that did not refuse: None when faithful
    seconds: float = DEFAULT_SECONDS
    must_succeed: bool = False  # an undamaged input: a refusal is a failure too
    after: Callable[[], str | None] | None = None  # a check after any outcome (e.g. that no pickled code ran)
    expect: str | None = None  # a regex a refusal's paragraph must match (a seed whose message once misled)


# A mutation: (generator, the family's fixtures, this run's folder) -> Run
Mutation = Callable[[random.Random, object, Path], Run]


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[Path], object]  # fixtures, built once per fuzz in the parent
    mutations: dict[str, Mutation]  # by name; a random run picks one by `weights` (default: equal)
    weights: dict[str, float] = field(default_factory=dict)

    def pick(self, rng: random.Random) -> str:
        names = sorted(self.mutations)
        return rng.choices(names, [self.weights.get(n, 1.0) for n in names])[0]


def fingerprint(paths: list[Path]) -> dict[str, str]:
    files = [p for root in paths for p in ([root] if root.is_file() else sorted(root.rglob("*"))) if p.is_file()]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


# A message that gives no reason ("...(weights_only=True): .") or refuses what it says it wants ("holds a list, not a
# list or tensor"): one paragraph, but not one that says what is wrong.
EMPTY_REASON = re.compile(r":\s+\.(\s|$)")
SELF_CONTRADICTION = re.compile(r"holds an? (\w+), not (?:an? )?(?:\w+ or )?\1\b")


def refusal_problem(outcome: Outcome, outputs: list[Path]) -> str | None:
    err = outcome.stderr
    if not err.startswith("error: ") or "\n\n" in err.strip():
        return f"exit 1 without one 'error: ' paragraph: {err[:300]!r}"
    flat = " ".join(err.split())
    if EMPTY_REASON.search(flat) or SELF_CONTRADICTION.search(flat):
        return f"a paragraph that does not say what is wrong: {flat[:300]!r}"
    for out in outputs:
        if out.exists() or list(out.parent.glob(f".{out.name}.eagle-convert-*")):
            return f"{out.name}: output or staging folder left behind"
    return None


def judge_run(run: Run, outcome: Outcome, before: dict[str, str]) -> tuple[str, str | None]:
    """(outcome word, failure or None)."""
    if problem := outcome.problem():
        return outcome.status, problem
    if run.after and (problem := run.after()):
        return "unsafe", problem
    if fingerprint(run.inputs) != before:
        return "changed", "an input file changed"
    if outcome.exit_code == 1:
        if run.must_succeed:
            return "refused", f"refused an undamaged input: {outcome.stderr[:300]!r}"
        if run.expect and not re.search(run.expect, " ".join(outcome.stderr.split())):
            return "refused", f"the paragraph does not say what is wrong ({run.expect}): {outcome.stderr[:300]!r}"
        return "refused", refusal_problem(outcome, run.outputs)
    if run.judge is None:
        return "accepted", None if outcome.exit_code == 0 else f"exit {outcome.exit_code}: {outcome.stderr[-300:]!r}"
    return "accepted", run.judge(outcome)


def execute(run: Run, memory: int = DEFAULT_MEMORY) -> tuple[str, str | None]:
    before = fingerprint(run.inputs)
    outcome = run_cli(run.argv, seconds=run.seconds, memory=memory)
    return judge_run(run, outcome, before)


def run_named(family: Family, name: str, fixtures: object, folder: Path, seed: int = 0,
              seconds: float | None = None) -> tuple[str, str, str | None]:
    """(outcome, what was done, failure) of one named mutation (a seeded case), in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    run = family.mutations[name](random.Random(f"{seed}:{family.name}:{name}"), fixtures, folder)
    if seconds is not None:
        run.seconds = seconds
    outcome, failure = execute(run)
    return outcome, run.what, failure


def fuzz_family(family: Family, runs: int, seed: int, workdir: Path | None = None, only: int | None = None,
                echo=print, fixtures: object = None) -> dict:
    """Run `runs` random mutations (or the one `only` names); returns {"family", "runs", "seconds", "refused",
    "accepted", "failures": [(i, what, why)]}."""
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"fuzz-{family.name}-", dir=workdir))
    try:
        fixtures = fixtures if fixtures is not None else family.build(root / "fixtures")
        summary = {"family": family.name, "runs": 0, "refused": 0, "accepted": 0, "failures": []}
        for i in [only] if only is not None else range(runs):
            rng = random.Random(f"{seed}:{family.name}:{i}")
            name = family.pick(rng)
            folder = root / f"run{i}"
            folder.mkdir()
            run = family.mutations[name](rng, fixtures, folder)
            outcome, failure = execute(run)
            shutil.rmtree(folder, ignore_errors=True)
            summary["runs"] += 1
            what = f"{name}: {run.what}"
            if failure:
                summary["failures"].append((i, what, failure))
                echo(f"FAIL {family.name} run {i} (FUZZ_SEED={seed} FUZZ_ONLY={i}): {what}: {failure}")
            else:
                summary[outcome] += 1
                if only is not None:
                    echo(f"{family.name} run {i}: {outcome}: {what}")
        summary["seconds"] = round(time.monotonic() - started, 1)
        return summary
    finally:
        shutil.rmtree(root, ignore_errors=True)
