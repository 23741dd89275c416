"""Hot-token maps (FR-Spec, `bench --token-map`) on a real EAGLE-1 pair, in ONE run: the head with its full LM head
and with maps of several sizes, on the same loaded target and prompts, so every ratio compares numbers taken under
the same machine load. Per configuration:

* draft step cost: median ms of one draft step (one fed-back row through the head and its LM head), measured
  interleaved with a target decode step (one token), so `step_ratio` = draft step / target step;
* τ (mean acceptance length), per-position acceptance, tokens/s of speculative decoding, and whether the output
  equals plain greedy decoding (the verify is the target's: it must, for every map);
* ratios against the full head.

Prompts are run one at a time, each through every configuration and plain decoding in a rotating order (so a load
change during the run lands on all of them alike). Maps come from `--map NAME=FILE` (any format `bench --token-map`
reads) and/or are built here from `--corpus` for each `--size` with `vocab-map build`'s counting and selection.
A benchmark, not a test: compare the numbers of one run with each other.

  nice -n 10 python scripts/bench/token_map_bench.py --target T --head H --prompts EVAL.jsonl \\
      --corpus CORPUS.jsonl --size 1024 --size 4096 --size 8192 --size 16384 --compat specforge --threads 1 \\
      -k 3 --max-new-tokens 48 --json OUT.json"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from eagle_convert.benchmark.session import load_target, open_session
from eagle_convert.benchmark.token_counts import CountSettings, count_tokens
from eagle_convert.checkpoint.open import open_input
from eagle_convert.draft.load import load_draft, tensor_reader
from eagle_convert.runner.heads import build_draft_head
from eagle_convert.runner.metrics import AcceptanceStats
from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.vocab.selection import select
from eagle_convert.vocab.token_map import read_token_map


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def built_maps(args, vocab_size: int) -> dict[str, torch.Tensor]:
    """NAME -> hot target ids: the --map files, then one map per --size from --corpus, counted once the --compat
    producer's way and selected per size (what `vocab-map build` writes)."""
    maps = {name: read_token_map(path, vocab_size).ids_tensor() for name, path in (m.split("=", 1) for m in args.map)}
    if args.size:
        counted = count_tokens(args.target, args.corpus, CountSettings(args.compat, args.max_length))
        print(f"counted {counted.counts.tokens} tokens in {counted.counts.samples} samples of {args.corpus} "
              f"({len(counted.counts.counts)} distinct ids)", flush=True)
        for size in args.size:
            maps[f"{args.compat} N={size}"] = select(counted.counts, size, vocab_size, args.compat).ids_tensor()
    return maps


@torch.inference_mode()
def step_costs(target, heads: dict, context: list[int], reps: int) -> dict[str, float]:
    """Median ms per call, all configurations and the target step interleaved rep by rep."""
    ids = torch.tensor([context])
    n = len(context) - 1
    out = target(ids[:, :n], range(n))
    fed_back = {}
    for name, head in heads.items():
        first = head(ids[:, 1:n + 1], head.target_feature(out), range(n), from_target=True, last_logits_only=True)
        fed_back[name] = first.hidden[:, -1:]
    calls = {name: (lambda head=head, h=fed_back[name]: head(ids[:, n:n + 1], h, [n], from_target=False,
                                                              last_logits_only=True))
             for name, head in heads.items()}
    calls["target step"] = lambda: target(ids[:, n:n + 1], range(n, n + 1), last_logits_only=True)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for rep in range(reps + 3):
        for name, call in calls.items():
            _, seconds = timed(call)
            if rep >= 3:  # the first calls pay for allocation
                times[name].append(seconds)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def run_prompts(target, heads: dict, session, args) -> dict:
    """Every prompt's first turn through each configuration and plain decoding, in a rotating order."""
    names = [*heads, "plain"]
    rounds = {name: [] for name in heads}
    tokens = dict.fromkeys(names, 0)
    seconds = dict.fromkeys(names, 0.0)
    identical = dict.fromkeys(heads, True)
    for index, prompt in enumerate(session.prompts):
        ids = session.encode([{"role": "user", "content": prompt.turns[0]}], prompt)
        outputs = {}
        order = names[index % len(names):] + names[:index % len(names)]
        for name in order:
            if name == "plain":
                out, s = timed(lambda ids=ids: plain_generate(target, ids, max_new_tokens=args.max_new_tokens,
                                                              eos_ids=session.eos))
                outputs[name] = out
            else:
                out, s = timed(lambda name=name, ids=ids: speculative_generate(
                    target, heads[name], ids, k=args.k, max_new_tokens=args.max_new_tokens, eos_ids=session.eos))
                outputs[name] = out.tokens
                rounds[name] += out.accepted_per_round
            tokens[name] += len(outputs[name])
            seconds[name] += s
        for name in heads:
            identical[name] &= outputs[name] == outputs["plain"]
        print(f"prompt {index + 1}/{len(session.prompts)} done", flush=True)
    results = {}
    for name in heads:
        stats = AcceptanceStats.from_accepted(args.k, rounds[name])
        results[name] = {"tau": stats.mean_acceptance_length, "per_position": list(stats.per_position_rates),
                         "rounds": stats.drafts, "tokens": tokens[name], "seconds": seconds[name],
                         "tokens_per_s": tokens[name] / seconds[name], "identical_to_plain": identical[name]}
    results["plain"] = {"tokens": tokens["plain"], "seconds": seconds["plain"],
                        "tokens_per_s": tokens["plain"] / seconds["plain"]}
    return results


def table(result: dict) -> str:
    full = result["configs"]["full LM head"]
    rows = ["| configuration | LM head rows | draft step ms | × target step | τ | per-position acceptance | tok/s | "
            "tok/s ÷ full | draft step ÷ full | speedup vs plain | identical to plain |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    plain = result["configs"]["plain"]["tokens_per_s"]
    for name, c in result["configs"].items():
        if name == "plain":
            continue
        rows.append(f"| {name} | {c['lm_head_rows']} | {c['draft_step_ms']:.2f} | {c['step_ratio']:.3f} | "
                    f"{c['tau']:.3f} | {' / '.join(f'{r:.3f}' for r in c['per_position'])} | "
                    f"{c['tokens_per_s']:.2f} | {c['tokens_per_s'] / full['tokens_per_s']:.3f} | "
                    f"{c['draft_step_ms'] / full['draft_step_ms']:.3f} | {c['tokens_per_s'] / plain:.3f} | "
                    f"{'yes' if c['identical_to_plain'] else 'NO'} |")
    rows.append(f"| plain decoding | - | - | - | - | - | {plain:.2f} | - | - | 1.000 | - |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--head", required=True, help="an EAGLE-1 head (any layout bench reads)")
    ap.add_argument("--prompts", required=True, help="bench prompts (JSONL); first turns are run")
    ap.add_argument("--map", action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--corpus", help="the corpus maps are built from (with --size)")
    ap.add_argument("--size", action="append", type=int, default=[], metavar="N")
    ap.add_argument("--compat", default="specforge")
    ap.add_argument("--max-length", type=int, default=2048, help="as vocab-map build")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--num-prompts", type=int, help="only the first N prompts")
    ap.add_argument("--reps", type=int, default=30, help="calls per step-cost median")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--step-costs-only", action="store_true",
                    help="only the draft and target step costs (they do not depend on the head's training)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = json.loads((Path(args.target) / "config.json").read_text())
    maps = built_maps(args, config["vocab_size"])
    target = load_target(args.target, dtype=torch.float32, device="cpu")
    draft = load_draft(open_input(args.head, role="draft").checkpoint, config)
    heads = {name: build_draft_head(draft.spec, tensor_reader(draft), target_embedding=target.embed_weight,
                                    target_lm_head=target.lm_head_weight, hot_token_ids=ids)
             for name, ids in [("full LM head", None), *maps.items()]}
    session = open_session(args.target, args.prompts)
    session.prompts = session.prompts[:args.num_prompts]
    first = session.prompts[0]
    context = session.encode([{"role": "user", "content": first.turns[0]}], first)
    costs = step_costs(target, heads, context, args.reps)
    runs = {name: {} for name in [*heads, "plain"]} if args.step_costs_only else run_prompts(target, heads, session,
                                                                                                    args)
    configs = {name: {"lm_head_rows": int(head.lm_head.shape[0]), "draft_step_ms": costs[name],
                      "step_ratio": costs[name] / costs["target step"], **runs[name]}
               for name, head in heads.items()}
    configs["plain"] = runs["plain"]
    result = {"target": args.target, "head": args.head, "prompts": args.prompts, "num_prompts": len(session.prompts),
              "k": args.k, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
              "target_step_ms": costs["target step"], "configs": configs}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    if not args.step_costs_only:
        print(table(result))


if __name__ == "__main__":
    main()
