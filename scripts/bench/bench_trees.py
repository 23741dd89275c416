"""Chains against trees on the real pair (issue 14): SmolLM2-135M-Instruct + its trained EAGLE-1 head, converted
to a temp folder first, the held-out prompts (scripts/real/data/real_eval_prompts.jsonl), greedy. A benchmark, not
a test.

For every prompt, every configuration runs back to back (plain decoding, chain k=3, k=5, dynamic trees of 4, 8, 16,
32 and 64 tokens, mc_sim_7b_63), so all of them share the machine's load; ratios against the plain run of the same
prompt are the numbers to read on a busy machine. Bookkeeping overhead = the fraction of a configuration's wall time
spent outside target and head forwards (tree building, masks, acceptance, KV moves, the Python loop).

Usage: PYTHONPATH=src python scripts/bench/bench_trees.py [--target DIR] [--head DIR] [--prompts N] [--max-new-tokens N]
       [--threads N] [--dtype float32] [--device cpu]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

import eagle_convert
from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.prompts import load_prompts
from eagle_convert.benchmark.session import DTYPES, load_target
from eagle_convert.checkpoint.index import Checkpoint
from eagle_convert.draft.load import load_draft, tensor_reader
from eagle_convert.io.source import LocalSource
from eagle_convert.runner.heads import build_draft_head
from eagle_convert.runner.model import TargetModel
from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.runner.trees.shapes import MC_SIM_7B_63, dynamic_tree, static_tree
from eagle_convert.runner.trees.tree_speculate import tree_generate

REAL = Path("/work/main/.real")
PROMPTS = Path(__file__).resolve().parents[1] / "real" / "data" / "real_eval_prompts.jsonl"
CONFIGS = {  # name -> (shape or chain k)
    "chain k=3": 3,
    "chain k=5": 5,
    "dynamic T=4 (d2,k2)": dynamic_tree(2, 2, 4),
    "dynamic T=8 (d4,k4)": dynamic_tree(4, 4, 8),
    "dynamic T=16 (d5,k4)": dynamic_tree(5, 4, 16),
    "dynamic T=32 (d5,k8)": dynamic_tree(5, 8, 32),
    "dynamic T=64 (d6,k8)": dynamic_tree(6, 8, 64),
    "mc_sim_7b_63 (26)": static_tree(MC_SIM_7B_63, "mc_sim_7b_63"),
}


class ForwardClock:
    """Seconds spent inside target and head forwards (CPU: no sync needed; CUDA: synced around each call)."""

    def __init__(self, device):
        self.device, self.seconds = device, 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            self.seconds += time.perf_counter() - start
            return out
        return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default=str(REAL / "smollm2"))
    parser.add_argument("--head", default=str(REAL / "eagle1-smollm2"))
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]

    with tempfile.TemporaryDirectory() as tmp:
        converted = Path(tmp) / "head"
        eagle_convert.convert(args.head, args.target, converted)
        target = load_target(args.target, dtype=dtype, device=device)
        info = load_draft(Checkpoint(LocalSource(converted)), target_config=Checkpoint(LocalSource(args.target)).config)
        head = build_draft_head(info.spec, tensor_reader(info), target_embedding=target.embed_weight,
                                target_lm_head=target.lm_head_weight, dtype=dtype, device=device)
    clock = ForwardClock(device)
    TargetModel.__call__ = clock.wrap(TargetModel.forward)
    head.forward = clock.wrap(head.forward)
    tokenizer = ChatTokenizer.from_dir(args.target)
    eos = tokenizer.eos_token_ids
    prompts = load_prompts(PROMPTS)[: args.prompts]

    def run(name, ids):
        config = CONFIGS.get(name)
        if name == "plain":
            return plain_generate(target, ids, max_new_tokens=args.max_new_tokens, eos_ids=eos), None
        if isinstance(config, int):
            r = speculative_generate(target, head, ids, k=config, max_new_tokens=args.max_new_tokens, eos_ids=eos)
            return r.tokens, (r.accepted_per_round, [config] * len(r.accepted_per_round))
        r = tree_generate(target, head, ids, shape=config, max_new_tokens=args.max_new_tokens, eos_ids=eos)
        return r.tokens, (r.accepted_per_round, r.nodes_per_round)

    names = ["plain", *CONFIGS]
    totals = {n: dict(wall=0.0, forwards=0.0, tokens=0, rounds=0, accepted=0, nodes=0, identical=True) for n in names}
    warm = tokenizer.encode_chat([{"role": "user", "content": "Hello"}])
    for name in names:
        run(name, warm)
    for prompt in prompts:
        ids = tokenizer.encode_chat([{"role": "user", "content": prompt.turns[0]}])
        reference = None
        for name in names:
            clock.seconds = 0.0
            start = time.perf_counter()
            tokens, rounds = run(name, ids)
            wall = time.perf_counter() - start
            t = totals[name]
            t["wall"] += wall
            t["forwards"] += clock.seconds
            t["tokens"] += len(tokens)
            if name == "plain":
                reference = tokens
            else:
                t["identical"] &= tokens == reference
                accepted, nodes = rounds
                t["rounds"] += len(accepted)
                t["accepted"] += sum(accepted)
                t["nodes"] += sum(nodes)

    base_rate = totals["plain"]["tokens"] / totals["plain"]["wall"]
    print(f"{len(prompts)} prompts, max {args.max_new_tokens} new tokens, greedy, {args.dtype} on {device} "
          f"({platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}), "
          f"head converted with `eagle-convert convert` (vllm-v0) to a temp folder")
    print("| configuration | τ | nodes / round | tok/s | speedup | bookkeeping | lossless |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        t = totals[name]
        rate = t["tokens"] / t["wall"]
        overhead = (t["wall"] - t["forwards"]) / t["wall"]
        if name == "plain":
            print(f"| plain decoding | 1 | - | {rate:.1f} | 1.00 | {overhead:.1%} | - |")
            continue
        tau = 1 + t["accepted"] / t["rounds"]
        print(f"| {name} | {tau:.2f} | {t['nodes'] / t['rounds']:.0f} | {rate:.1f} | {rate / base_rate:.2f} | "
              f"{overhead:.1%} | {'identical' if t['identical'] else 'DIFFERS'} |")


if __name__ == "__main__":
    main()
