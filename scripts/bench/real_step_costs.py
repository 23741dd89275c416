"""What one speculative round costs on the real pair (issue 17): a target decode step (1 token), a verify of k+1
tokens, and one draft step of each head (one fed-back row, its LM head on that row), medians of --reps calls after a
--context-token prefill, with our runner in fp32. From these, the best speedup a head of acceptance length τ can give:
    ideal(τ) = τ * t_decode / (t_verify(k+1) + k * t_head)
A benchmark, not a test (the machine is shared: compare the numbers of one run with each other).
  python scripts/bench/real_step_costs.py --target T --head NAME=DIR [--head NAME=DIR ...] [-k 3] [--tau NAME=X ...]"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from eagle_convert.benchmark.session import load_target
from eagle_convert.checkpoint.open import open_input
from eagle_convert.draft.load import load_draft, tensor_reader
from eagle_convert.runner.heads import aux_layer_ids_for, build_draft_head


def median_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--head", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--tau", action="append", default=[], metavar="NAME=X", help="measured τ, for ideal speedups")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--context-tokens", type=int, default=150)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = json.load(open(f"{a.target}/config.json"))
    P, k = a.context_tokens, a.k
    ids = torch.randint(0, cfg["vocab_size"], (1, P + k + 1), generator=torch.Generator().manual_seed(0))
    heads = {}
    for item in a.head:
        name, path = item.split("=", 1)
        d = load_draft(open_input(path, role="draft").checkpoint, cfg)
        heads[name] = d
    aux = next((aux_layer_ids_for(d.spec, cfg["num_hidden_layers"]) for d in heads.values() if d.spec.is_eagle3), ())
    target = load_target(a.target, dtype=torch.float32, device="cpu", aux_layer_ids=aux)
    out = target(ids[:, :P], range(P))
    res = {"context_tokens": P, "k": k, "threads": a.threads}
    res["target_decode_ms"] = median_ms(lambda: target(ids[:, P:P + 1], range(P, P + 1), last_logits_only=True), a.reps)
    res["target_verify_ms"] = median_ms(lambda: target(ids[:, P:P + k + 1], range(P, P + k + 1)), a.reps)
    for name, d in heads.items():
        head = build_draft_head(d.spec, tensor_reader(d), target_embedding=target.embed_weight,
                                target_lm_head=target.lm_head_weight)
        first = head(ids[:, 1:P + 1], head.target_feature(out), range(P), from_target=True, last_logits_only=True)
        hidden = first.hidden[:, -1:]
        res[f"{name}_head_step_ms"] = median_ms(
            lambda head=head, hidden=hidden: head(ids[:, P:P + 1], hidden, [P], from_target=False,
                                                  last_logits_only=True),
            a.reps)
        res[f"{name}_lm_head_rows"] = int(head.lm_head.shape[0])
    round_cost = {n: res["target_verify_ms"] + k * res[f"{n}_head_step_ms"] for n in heads}
    for item in a.tau:
        name, tau = item.split("=", 1)
        res[f"{name}_ideal_speedup_at_tau_{float(tau):.3f}"] = float(tau) * res["target_decode_ms"] / round_cost[name]
    for n in heads:
        res[f"{n}_tau_for_speedup_1"] = round_cost[n] / res["target_decode_ms"]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
