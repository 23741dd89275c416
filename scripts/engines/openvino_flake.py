"""openvino.genai#4425 on this machine: do freshly built CPU pipelines ever accept zero drafts? Builds N fresh
LLMPipeline(target, draft_model=...) pairs, each in a NEW process (as each test run builds its own), decodes the same
token-id prompts greedily and prints, per pipeline, GenAI's accepted tokens and whether the output equals the first
pipeline's. Run in .venv-openvino:

    python openvino_flake.py TARGET_IR DRAFT_IR PROMPTS.jsonl --runs 10 [--k 3 --max-new-tokens 32] [--precision f32]

--precision: OpenVINO's INFERENCE_PRECISION_HINT for both models (what bench --engine openvino sets for fp32);
`default` leaves the CPU plugin's own choice (bf16 where the CPU has it)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

ONE = r"""
import json, sys
import numpy as np, openvino as ov, openvino_genai as g
target, draft, prompts, k, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
hint = {} if sys.argv[6] == "default" else {"INFERENCE_PRECISION_HINT": sys.argv[6]}
pipe = g.LLMPipeline(target, "CPU", draft_model=g.draft_model(draft, "CPU", **hint), **hint)
cfg = g.GenerationConfig(); cfg.max_new_tokens = n; cfg.ignore_eos = True; cfg.do_sample = False
cfg.num_assistant_tokens = k
out = []
for line in open(prompts):
    ids = json.loads(line)["prompt_ids"]
    r = pipe.generate(g.TokenizedInputs(ov.Tensor(np.array([ids], dtype=np.int64)),
                                        ov.Tensor(np.ones((1, len(ids)), dtype=np.int64))), cfg)
    metrics = r.extended_perf_metrics
    out.append({"tokens": [int(t) for t in r.tokens[0]], "accepted": int(metrics.get_num_accepted_tokens())})
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("prompts")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--precision", default="f32", help="f32, bf16, ... or default")
    args = parser.parse_args()
    first, zero = None, 0
    for run in range(args.runs):
        done = subprocess.run([sys.executable, "-c", ONE, args.target, args.draft, args.prompts, str(args.k),
                               str(args.max_new_tokens), args.precision], capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        first = first or result
        accepted = [p["accepted"] for p in result]
        zero += any(a == 0 for a in accepted)
        same = [p["tokens"] for p in result] == [p["tokens"] for p in first]
        print(json.dumps({"run": run, "accepted": accepted, "same_output": same}), flush=True)
    print(json.dumps({"runs": args.runs, "precision": args.precision, "runs_with_a_prompt_accepting_zero": zero}))


if __name__ == "__main__":
    main()
