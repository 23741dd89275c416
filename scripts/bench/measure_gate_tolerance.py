#!/usr/bin/env python3
"""How far τ of a correct conversion moves from its raw head when the reference gate cannot be exact (bf16, or
sampling), against how far the deliberate mistakes move it: the numbers behind `gates.tau_tolerance` (Z standard
errors, at least MIN_TAU_TOLERANCE).

For each mode (fp32 greedy, bf16 greedy, fp32 and bf16 at temperature 1 over several seeds), every correct conversion
of the tiny release pair (eagle_convert.testing.vllm_pairs: build_releases) and every deliberate mistake
of eagle_convert.testing.gate_mistakes is benched with `--reference-draft` on the raw head; prints |Δτ| per
case and the extremes.

Usage: python scripts/bench/measure_gate_tolerance.py WORKDIR [--seeds 3] [--tokens 48] [--prompts 8]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

import eagle_convert
from eagle_convert.testing.gate_mistakes import CORRECT, MISTAKES, edit_config, edit_tensors
from eagle_convert.testing.vllm_pairs import build_releases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("-k", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = Path(args.workdir)
    rng = random.Random(0)
    prompts = [[1] + [rng.randrange(2, 256) for _ in range(rng.randrange(3, 9))] for _ in range(args.prompts)]
    rel = build_releases(root, prompts=prompts)
    cases = []
    for kind, to, options in CORRECT:
        out = root / f"ok-{kind}-{to}"
        eagle_convert.convert(str(rel[kind]), str(rel["target"]), out, to=to, dtype="float32", **options)
        cases.append(("correct", f"{kind} -> {to}" + (f" ({options})" if options else ""), kind, out))
    for name, kind, to, options, tensors, config in MISTAKES:
        out = root / f"bad-{name.replace(' ', '-')}"
        eagle_convert.convert(str(rel[kind]), str(rel["target"]), out, to=to, dtype="float32", **options)
        if tensors:
            edit_tensors(out, tensors)
        if config:
            edit_config(out, config)
        cases.append(("mistake", name, kind, out))
    modes = [("float32", 0.0, [0]), ("bfloat16", 0.0, [0])]
    modes += [(dtype, 1.0, list(range(args.seeds))) for dtype in ("float32", "bfloat16")]
    rows = []
    start = time.time()
    for dtype, temperature, seeds in modes:
        for what, name, kind, out in cases:
            deltas, passed, tolerances = [], [], []
            for seed in seeds:
                report = eagle_convert.bench(str(rel["target"]), str(out), k=args.k, max_new_tokens=args.tokens,
                                             prompts=str(rel["prompts"]), dtype=dtype, temperature=temperature,
                                             seed=seed, baseline=False, ignore_eos=True,
                                             reference_draft=str(rel[kind]))
                check = report.gates[0]
                deltas.append(abs(check.details["tau"] - check.details["reference_tau"]))
                passed.append(check.passed)
                tolerances.append(check.details["tolerance"] or 0.0)
            rows.append({"dtype": dtype, "temperature": temperature, "case": what, "name": name,
                         "max_abs_delta_tau": max(deltas), "min_tolerance": min(tolerances),
                         "gate_passed": all(passed),
                         "gate_failed_seeds": passed.count(False), "seeds": len(seeds)})
            print(f"{dtype:9} T={temperature:<4} {what:8} {name:38} max|Δτ| {max(deltas):.4f}  "
                  f"tolerance >= {min(tolerances):.3f}  "
                  f"gate {'pass' if all(passed) else 'FAIL'} ({passed.count(False)}/{len(seeds)} failed)", flush=True)
    for dtype, temperature, _ in modes:
        mine = [r for r in rows if r["dtype"] == dtype and r["temperature"] == temperature]
        ok = max(r["max_abs_delta_tau"] for r in mine if r["case"] == "correct")
        bad = sorted((r["max_abs_delta_tau"], r["name"]) for r in mine if r["case"] == "mistake")
        print(f"{dtype} T={temperature}: correct max |Δτ| {ok:.4f}; mistakes |Δτ| from {bad[0][0]:.4f} "
              f"({bad[0][1]}) to {bad[-1][0]:.4f}")
    print(f"({time.time() - start:.0f} s)")
    (root / "tolerance.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
