#!/usr/bin/env python3
"""Wall time of `bench --engine ours` against `bench --engine vllm` on the same pair and prompts, and their counters
side by side (docs/benchmarks.md, issue 13). Runs both as the user would (the CLI, --json), one after the other:

  python scripts/bench/bench_engines.py --target T --draft D --prompts P.jsonl [--max-new-tokens 64] [--first 4] \
      [--vllm-python .venv-vllm/bin/python] [--tiny DIR]   # --tiny: build the tiny release pair under DIR first

Prints a markdown table: per engine the whole command's wall time, the engine start (vLLM: speculative and baseline
engines apart), generation time, tok/s, speedup, τ and the per-prompt counters."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(engine: str, args, prompts: Path) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "eagle_convert", "bench", "-t", args.target, "-d", args.draft, "--prompts",
           str(prompts), "-k", str(args.k), "--max-new-tokens", str(args.max_new_tokens), "--dtype", "float32",
           "--json", "--engine", engine] + (["--ignore-eos"] if args.ignore_eos else []) + (
        ["--threads", str(args.threads)] if args.threads and engine == "ours" else [])
    env = {**os.environ, "EAGLE_CONVERT_VLLM_PYTHON": args.vllm_python}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{engine}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--prompts")
    ap.add_argument("--tiny", help="build the tiny release pair (eagle_convert.testing.vllm_pairs) here and bench "
                                  "its EAGLE-1")
    ap.add_argument("--first", type=int, default=0, help="only the first N prompts")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    args = ap.parse_args()
    if args.tiny:
        from eagle_convert.testing.vllm_pairs import build_releases

        pair = build_releases(Path(args.tiny))
        args.target, args.draft, args.prompts = str(pair["target"]), str(pair["eagle1"]), str(pair["prompts"])
    lines = Path(args.prompts).read_text().splitlines()
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("\n".join(lines[:args.first] if args.first else lines) + "\n")
        results = {engine: run(engine, args, prompts) for engine in ("ours", "vllm")}
    print("| engine | command wall s | engine start s (spec + baseline) | generation s | tok/s | baseline tok/s | "
          "speedup | τ | drafts | accepted | lossless |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for engine, (data, wall) in results.items():
        o, block = data["overall"], data.get("engine") or {}
        start = (f"{block['start_time_s']:.1f} + {block['baseline_start_time_s']:.1f}" if block else "-")
        print(f"| {engine} | {wall:.1f} | {start} | {o['wall_time_s']:.1f} | {o['tokens_per_s']:.1f} | "
              f"{o['baseline_tokens_per_s']:.1f} | {o['speedup']:.2f} | "
              f"{o['acceptance']['mean_acceptance_length']:.3f} "
              f"| {o['acceptance']['drafts']} | {o['acceptance']['accepted']} | {data['lossless']['identical']} |")
    print("\n| prompt | ours drafts / accepted / histogram | vllm drafts / accepted / histogram | same tokens |")
    print("|---|---|---|---|")
    ours, theirs = results["ours"][0], results["vllm"][0]
    for a, b in zip(ours["prompts"], theirs["prompts"]):
        x, y = a["acceptance"], b["acceptance"]
        print(f"| {a['id']} | {x['drafts']} / {x['accepted']} / {x['histogram']} | {y['drafts']} / {y['accepted']} / "
              f"{y['histogram']} | {a['output_token_ids'] == b['output_token_ids']} |")


if __name__ == "__main__":
    main()
