"""Fuzz `eagle-convert convert` with damaged inputs: every run must refuse cleanly or convert faithfully.

    make fuzz [FUZZ_N=1000] [FUZZ_SEED=0] [FUZZ_ONLY=RUN]     (tests/conversion/test_fuzz.py, marker `fuzz`)

Builds tiny checkpoints (src/eagle_convert/testing/tiny.py: a sharded safetensors target, an EAGLE-1 `.bin` head with
an fc bias, an EAGLE-3 safetensors head, the same EAGLE-3 head with llama3 RoPE scaling) and five conversions of them
(EAGLE-3 -> vllm, EAGLE-1 -> vllm-v0, EAGLE-1 -> vllm with --fc-bias fold, both EAGLE-3 heads -> gguf:
support/fuzz_gguf.py reads the GGUF back), converts each once as a reference, then per run copies one conversion's
inputs, damages one file (support/fuzz_mutations.py: safetensors headers, entries, lengths, nesting,
metadata, data bits, NaN/Inf, truncation; pickles; config and index JSON; missing and extra files) and runs the
CLI in a forked child bounded in time and address space (support/fuzz_bounded.py), with --allow-nonfinite on some
runs. A run passes when either
- it is refused: exit 1, one paragraph on stderr starting "error: " (no traceback), no output folder, no staging
  folder left, every input file byte-identical to before the run; or
- it converts faithfully: every output tensor loads with safetensors' own loader and equals (bit for bit, NaN
  included) its source as safetensors / torch.load read the (damaged) source file, cast to the output dtype; a derived
  tensor (fc-bias fold, zeros) equals the reference conversion's when the damaged file is not among its sources; the
  NaN/Inf values written are exactly those the provenance records (none without --allow-nonfinite); inputs unchanged.
Run i uses its own generator (seed, i): `--only i` replays it. Exit status 1 if any run failed.

A config.json value of the wrong type (a list, null or string where a size goes) is refused like any other damage:
configs are checked against src/eagle_convert/checkpoint/config_schema.py when read."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target
from support.fuzz_bounded import Outcome, run_cli
from support.fuzz_gguf import ROPE_FREQS, gguf_rewritten, read_gguf_output, with_llama3_copy
from support.fuzz_mutations import Mutation, mutate


@dataclass(frozen=True)
class Case:
    name: str
    draft: str  # folder names under the fixtures root
    args: tuple[str, ...]


CASES = (Case("eagle3-vllm", "eagle3", ("--to", "vllm")), Case("eagle1-vllm-v0", "eagle1", ("--to", "vllm-v0")),
         Case("eagle1-fold", "eagle1", ("--to", "vllm", "--fc-bias", "fold")))
# An EAGLE-3 run goes to GGUF two times in three, decided by a generator of its own, so that run i of CASES keeps its
# mutation (the reproducers in test_fuzz.py name runs by number).
GGUF_CASES = (Case("eagle3-gguf", "eagle3", ("--to", "gguf")),
              Case("eagle3-llama3-gguf", "eagle3-llama3", ("--to", "gguf", "--allow-rope-mismatch")))


def build_fixtures(root: Path) -> None:
    cfg = TinyConfig(num_hidden_layers=8)
    tensors = make_target(root / "target", cfg, shards=2)
    make_eagle1_head(root / "eagle1", cfg, tensors)  # pytorch_model.bin, fc bias
    make_eagle3_head(root / "eagle3", cfg, tensors)
    with_llama3_copy(root / "eagle3", root / "eagle3-llama3")


def convert(draft: Path, target: Path, out: Path, case: Case, allow: bool) -> Outcome:
    """The CLI in a forked child bounded in time and memory (support/fuzz_bounded.py)."""
    args = ["convert", str(draft), "-t", str(target), "-o", str(out), "-q", *case.args]
    return run_cli(args + (["--allow-nonfinite"] if allow else []))


def fingerprint(folders: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for f in folders for p in sorted(f.rglob("*"))
            if p.is_file()}


def load_source(path: str) -> dict[str, torch.Tensor]:
    """A source file as its own format's loader reads it (not through eagle-convert)."""
    if path.endswith(".safetensors"):
        return load_file(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state["state_dict"] if isinstance(state.get("state_dict"), dict) else state


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def read_output(out: Path) -> dict[str, torch.Tensor]:
    if list(out.glob("*.gguf")):
        return read_gguf_output(out)
    tensors = {}
    for f in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(f))
    return tensors


def nonfinite(t: torch.Tensor) -> int:
    return int(t.numel() - torch.isfinite(t).sum()) if t.dtype.is_floating_point else 0


def check_refusal(result: Outcome, out: Path) -> str | None:
    if problem := result.problem():  # a hang, memory, an escaped exception, a traceback
        return problem
    err = result.stderr
    if not err.startswith("error: ") or "\n\n" in err.strip():
        return f"not one paragraph: {err[:300]!r}"
    if out.exists() or list(out.parent.glob(f".{out.name}.eagle-convert-*")):
        return "output or staging folder left behind"
    return None


def check_output(out: Path, mutation: Mutation, reference: dict[str, torch.Tensor], allow: bool) -> str | None:
    provenance = json.loads((out / "eagle_convert.json").read_text())
    written = read_output(out)  # safetensors' own loader
    if set(written) != set(provenance["tensors"]):
        return f"tensors {sorted(written)} but provenance names {sorted(provenance['tensors'])}"
    counts = {n: c for n, t in written.items() if (c := nonfinite(t))}
    if counts != provenance.get("nonfinite", {}) or (counts and not allow):
        return f"NaN/Inf written {counts}, provenance says {provenance.get('nonfinite')}, allowed: {allow}"
    changed = str(mutation.file.resolve()) if mutation.file else None
    for name, record in provenance["tensors"].items():
        how, sources = record["how"], record["sources"]
        if how == "copy" or how.startswith("cast "):
            (src,) = sources
            try:
                expected = load_source(src["file"])[src["name"]]
            except Exception as exc:  # noqa: BLE001 - any refusal by the format's own loader
                return f"{name} converted from {src['file']}, which its own loader refuses ({exc})"
            if not same(written[name], expected.to(written[name].dtype)):
                return f"{name} differs from {src['file']}:{src['name']} as safetensors/torch read it"
        elif (rewritten := gguf_rewritten(how, sources)) is not None:
            try:
                expected = rewritten(load_source, written[name].dtype)
            except Exception as exc:  # noqa: BLE001 - any refusal by the format's own loader
                return f"{name} converted from {sources[0]['file']}, which its own loader refuses ({exc})"
            if not same(written[name], expected):
                return f"{name} differs from its source, rewritten as provenance says ({how})"
        elif name == ROPE_FREQS and changed and changed.endswith("config.json"):
            continue  # computed from the draft's (damaged) rope_scaling: fuzz_gguf.py checks it is finite
        elif changed not in {s["file"] for s in sources} or not mutation.touched:
            if name in reference and not same(written[name], reference[name]):
                return f"{name} ({how}) differs from the reference conversion"
    return None


def run_once(i: int, seed: int, fixtures: Path, work: Path, references: dict,
             gguf: bool = False) -> tuple[str, str, str | None]:
    """(outcome, what was done, failure or None) of run i (`gguf`: every run is one of GGUF_CASES)."""
    rng = random.Random(f"{seed}:{i}")
    case = rng.choice(CASES)
    to_gguf = random.Random(f"{seed}:{i}:gguf").randrange(3)
    if (case.draft == "eagle3" or gguf) and to_gguf < len(GGUF_CASES):
        case = GGUF_CASES[to_gguf]
    elif gguf:
        case = GGUF_CASES[i % len(GGUF_CASES)]
    allow = rng.random() < 0.3
    run = work / f"run{i}"
    draft, target = run / case.draft, run / "target"
    shutil.copytree(fixtures / case.draft, draft)
    shutil.copytree(fixtures / "target", target)
    mutation = mutate(rng, [draft, draft, target])
    what = f"{case.name}{' --allow-nonfinite' if allow else ''}: {mutation.what}" + (
        f" ({mutation.file.parent.name}/{mutation.file.name})" if mutation.file else "")
    before = fingerprint([draft, target])
    out = run / "out"
    result = convert(draft, target, out, case, allow)
    try:
        if fingerprint([draft, target]) != before:
            return "FAIL", what, "an input file changed"
        if result.exit_code == 0:
            if problem := result.problem():
                return "converted", what, problem
            if list(out.parent.glob(f".{out.name}.eagle-convert-*")):
                return "converted", what, "a staging folder left behind"
            return "converted", what, check_output(out, mutation, references[case.name], allow)
        return "refused", what, check_refusal(result, out)
    finally:
        shutil.rmtree(run, ignore_errors=True)


def fuzz(runs: int, seed: int, workdir: Path | None = None, only: int | None = None, echo=print,
         gguf: bool = False) -> dict:
    """Run the fuzzer; returns {"runs", "seconds", "refused", "converted", "failures": [(i, what, why)]}. `gguf`:
    only the `--to gguf` cases."""
    started = time.monotonic()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="fuzz-convert-", dir=workdir))
    try:
        fixtures, work = root / "fixtures", root / "work"
        build_fixtures(fixtures)
        references = {}
        for case in CASES + GGUF_CASES:
            result = convert(fixtures / case.draft, fixtures / "target", root / case.name, case, False)
            assert result.exit_code == 0, f"the unmutated {case.name} conversion failed: {result.stderr}"
            references[case.name] = read_output(root / case.name)
        summary = {"runs": 0, "refused": 0, "converted": 0, "failures": []}
        for i in [only] if only is not None else range(runs):
            outcome, what, failure = run_once(i, seed, fixtures, work, references, gguf)
            summary["runs"] += 1
            if failure or outcome == "FAIL":
                summary["failures"].append((i, what, failure))
                echo(f"FAIL run {i} (--seed {seed} --only {i}): {what}: {failure}")
            else:
                summary[outcome] += 1
                if only is not None:
                    echo(f"run {i}: {outcome}: {what}")
        summary["seconds"] = round(time.monotonic() - started, 1)
        return summary
    finally:
        shutil.rmtree(root, ignore_errors=True)
