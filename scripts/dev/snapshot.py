"""Prove a change left behaviour alone: record every file the test suite writes (every conversion of every test
fixture into every layout, with its provenance) and `bench --json` on the golden pairs (chains and trees, timings
removed), then compare two records.

  python scripts/dev/snapshot.py record OUT.json     # before the change
  python scripts/dev/snapshot.py record NEW.json     # after it
  python scripts/dev/snapshot.py compare OUT.json NEW.json

The suite runs with a fixed --basetemp, so paths written into provenance are the same in both runs; every file left
under it is hashed. Files whose content legitimately varies run to run (logs, timing reports) show up in the
comparison and are listed, not hidden: judge them by name."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASETEMP = Path(os.environ.get("SNAPSHOT_BASETEMP", "/tmp/eagle-convert-snapshot"))
GOLDEN = ROOT / "tests" / "golden"
if not GOLDEN.is_dir():  # before the golden sets moved into the repository
    GOLDEN = ROOT.parent / "shared" / "golden"
BENCH_PAIRS = ("eagle1-llama2", "eagle1-qwen2", "eagle3-llama31")
TIMING_WORDS = ("second", "time", "speed", "per_s", "tok_s", "wall", "_ms", "elapsed", "throughput")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if not any(w in k.lower() for w in TIMING_WORDS)}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def suite_files(pytest_args: list[str]) -> dict[str, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={BASETEMP}", *pytest_args]
    status = subprocess.run(cmd, cwd=ROOT).returncode  # failures are recorded, and compared, not fatal
    print(f"suite exit status {status}")
    return {str(p.relative_to(BASETEMP)): _sha256(p) for p in sorted(BASETEMP.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def golden_benches() -> dict[str, dict]:
    out = {}
    for pair in (GOLDEN / name for name in BENCH_PAIRS):
        for label, extra in (("chain-k3", ["-k", "3"]), ("tree-dynamic", ["--tree", "dynamic"])):
            cmd = [sys.executable, "-m", "eagle_convert", "bench", "-t", str(pair / "target"),
                   "-d", str(pair / "draft"), "--max-new-tokens", "16", "--threads", "1", "--json", *extra]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            key = f"{pair.name}/{label}"
            out[key] = {"exit": proc.returncode,
                        "report": _without_timings(json.loads(proc.stdout.replace(str(GOLDEN), "<golden>")))
                        if proc.stdout.strip() else proc.stderr}
    return out


def record(path: str, pytest_args: list[str]) -> None:
    data = {"files": suite_files(pytest_args), "bench": golden_benches()}
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True))
    print(f"{len(data['files'])} files, {len(data['bench'])} bench reports -> {path}")


def compare(a_path: str, b_path: str) -> int:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    problems = 0
    for name in sorted(set(a["files"]) | set(b["files"])):
        if a["files"].get(name) != b["files"].get(name):
            problems += 1
            state = "missing after" if name not in b["files"] else "new" if name not in a["files"] else "differs"
            print(f"file {state}: {name}")
    for key in sorted(set(a["bench"]) | set(b["bench"])):
        if a["bench"].get(key) != b["bench"].get(key):
            problems += 1
            print(f"bench differs: {key}")
    print(f"{len(a['files'])} files and {len(a['bench'])} bench reports compared: {problems} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
