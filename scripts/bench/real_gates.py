#!/usr/bin/env python3
"""The reference gate on the real pair: the trained SmolLM2 EAGLE-1 head (make real-demo) converted correctly and
deliberately wrong, each benched with `--reference-draft` on the raw head, on the held-out prompts; prints the
Markdown table of docs/benchmarks.md ("Reference gate on the real pair") and writes every report under WORK.

Usage: python scripts/bench/real_gates.py [--real .real] [--work .real/gates] [--max-new-tokens 64] [--threads 1]
                                   [--num-prompts N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagle_convert", *args], capture_output=True, text=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", default=str(ROOT / ".real"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--max-new-tokens", default="64")
    ap.add_argument("--threads", default="1")
    ap.add_argument("-k", default="3")
    ap.add_argument("--num-prompts", type=int, default=0, help="only the first N held-out prompts (0 = all 20)")
    a = ap.parse_args()
    real = Path(a.real)
    head, target = real / "eagle1-smollm2", real / "smollm2"
    work = Path(a.work) if a.work else real / "gates"
    work.mkdir(parents=True, exist_ok=True)
    prompts = ROOT / "scripts" / "real" / "data" / "real_eval_prompts.jsonl"
    if a.num_prompts:
        subset = work / f"prompts-first-{a.num_prompts}.jsonl"
        subset.write_text("".join(prompts.read_text().splitlines(keepends=True)[: a.num_prompts]))
        prompts = subset
    correct = {"vllm-v0": [], "vllm --fc-bias fold": ["--fc-bias", "fold"], "sglang": []}
    cases = []
    for name, extra in correct.items():
        out = work / name.replace(" ", "").replace("--", "-")
        proc = run("convert", str(head), "-t", str(target), "-o", str(out), "--to", name.split()[0], "--force", "-q",
                   *extra)
        assert proc.returncode == 0, proc.stderr
        cases.append(("correct", name, out))
    out = work / "vllm-fc-bias-drop"
    assert run("convert", str(head), "-t", str(target), "-o", str(out), "--to", "vllm", "--fc-bias", "drop", "--force",
               "-q").returncode == 0
    cases.append(("mistake", "fc bias dropped (vllm --fc-bias drop)", out))
    trainer = ROOT / "scripts" / "train" / "train_eagle_head.py"
    proc = subprocess.run([sys.executable, str(trainer), "mistakes", "--head", str(head), "--converted",
                           str(work / "vllm-v0"), "--out", str(work / "mistakes")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cases += [("mistake", "fc halves swapped", work / "mistakes" / "fc-swapped"),
              ("mistake", "LM head permuted", work / "mistakes" / "lm-head-permuted"),
              ("mistake", "LM head perturbed", work / "mistakes" / "lm-head-perturbed")]
    rows = ["| conversion | kind | τ | τ raw head | first difference | `--min-acceptance-length 1.3` | "
            "`--reference-draft` exit |", "|---|---|---|---|---|---|---|"]
    for what, name, draft in cases:
        report = work / f"report-{draft.name}.json"
        start = time.time()
        proc = run("bench", "-t", str(target), "-d", str(draft), "--reference-draft", str(head), "--prompts",
                   str(prompts), "-k", a.k, "--max-new-tokens",
                   a.max_new_tokens, "--no-baseline", "--threads", a.threads, "-q", "--report", str(report))
        data = json.loads(report.read_text())
        check = data["gate"]["checks"][0]
        first = check["first_difference"]
        where = "none" if first is None else f"prompt {first['prompt']}, round {first['round']}"
        floor = "pass" if check["tau"] >= 1.3 else "FAIL"
        rows.append(f"| {name} | {what} | {check['tau']:.3f} | {check['reference_tau']:.3f} | {where} | {floor} | "
                    f"{proc.returncode} |")
        print(rows[-1], f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
