"""The bench runner at long context (issue 24, item 4): peak memory and time of a prompt's prefill, and the cost of one
decode step against the KV cache's ALLOCATED length. A benchmark, not a test.

Each measurement runs in a fresh worker process (its own peak RSS: VmHWM, reset after the model is built), importing
eagle_convert from `--src`; with `--baseline-src` (e.g. a checkout of the commit before the change) the same
measurements run on the old code in the same invocation, so before and after share the machine's load.

Model: random weights with SmolLM2-135M's attention shape (hidden 576, 9 query / 3 KV heads of 64, RoPE theta 1e5)
and `--layers` layers, vocab 8192 (the LM head does not scale with the prompt), fp32 unless `--dtype`.

Usage: python scripts/bench/bench_long_context.py [--baseline-src /tmp/old/src] [--lengths 2048,8192,16384]
       [--baseline-lengths 2048,8192] [--repeat 2] [--threads 1] [--json out.json]
(before and after alternate per measurement, so that both see the same machine load)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 8192, "hidden_size": 576,
          "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
          "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 65536,
          "tie_word_embeddings": True, "hidden_act": "silu"}


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def build_target(layers: int, dtype_name: str, device: str):
    import torch

    from eagle_convert.runner.model import TargetModel
    config = dict(CONFIG, num_hidden_layers=layers)
    g = torch.Generator().manual_seed(0)
    shapes = {"model.embed_tokens.weight": (8192, 576), "model.norm.weight": (576,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (576,), p + "post_attention_layernorm.weight": (576,),
                   p + "self_attn.q_proj.weight": (576, 576), p + "self_attn.k_proj.weight": (192, 576),
                   p + "self_attn.v_proj.weight": (192, 576), p + "self_attn.o_proj.weight": (576, 576),
                   p + "mlp.gate_proj.weight": (1536, 576), p + "mlp.up_proj.weight": (1536, 576),
                   p + "mlp.down_proj.weight": (576, 1536)}
    weights = {name: torch.randn(*shape, generator=g) * shape[-1] ** -0.5 for name, shape in shapes.items()}
    return TargetModel(config, weights.__getitem__, dtype=getattr(torch, dtype_name), device=device)


def run_prefill(target, length: int) -> None:
    import torch
    ids = torch.randint(0, 8192, (length,), generator=torch.Generator().manual_seed(1)).tolist()
    try:
        from eagle_convert.runner.prefill import prefill  # the chunked prefill
    except ImportError:  # the code before it: one pass over the whole prompt
        target(torch.tensor([ids]), range(length), last_logits_only=True)
        return
    prefill(target, None, ids, lambda logits: logits.argmax(-1))


def worker(args) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    target = build_target(args.layers, args.dtype, args.device)
    if args.kind == "prefill":
        rss = status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        start = time.perf_counter()
        with torch.inference_mode():
            run_prefill(target, args.length)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "peak_extra_mib": (status_kib("VmHWM") - rss) / 1024}
    # decode: fill args.fill positions, allocate every cache to args.length slots, time one-token steps
    with torch.inference_mode():
        run_prefill(target, args.fill)
        for layer in target.layers:
            if layer.attention.cache.capacity < args.length:
                layer.attention.cache._grow(args.length)
        token = torch.zeros(1, 1, dtype=torch.int64)
        times = []
        for step in range(args.steps):
            start = time.perf_counter()
            target(token, range(args.fill + step, args.fill + step + 1), last_logits_only=True)
            times.append(time.perf_counter() - start)
    return {"step_ms": 1000 * statistics.median(times[2:] or times),
            "capacity": target.layers[0].attention.cache.capacity}


def measure(src: str, kind: str, length: int, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--length", str(length), "--layers", str(args.layers),
           "--threads", str(args.threads), "--dtype", args.dtype, "--device", args.device, "--fill", str(args.fill),
           "--steps", str(args.steps)]
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["killed"])[-1][:200], "rc": out.returncode}
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(results: list[dict]) -> dict:
    """Median time, largest peak over the repeats; the first error if any run failed."""
    failed = [r for r in results if "error" in r]
    if failed:
        return failed[0]
    out = {"runs": len(results)}
    for key in results[0]:
        values = [r[key] for r in results]
        out[key] = statistics.median(values) if key in ("seconds", "step_ms") else max(values)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default=str(REPO / "src"))
    p.add_argument("--baseline-src")
    p.add_argument("--lengths", default="2048,8192,16384")
    p.add_argument("--baseline-lengths", default="2048,8192")
    p.add_argument("--capacities", default="1024,32768", help="allocated KV lengths for the decode step")
    p.add_argument("--fill", type=int, default=512, help="filled positions for the decode step")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement and version (median time)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", choices=["prefill", "decode"])
    p.add_argument("--length", type=int)
    args = p.parse_args()
    if args.worker:
        args.kind = args.worker
        print(json.dumps(worker(args)))
        return
    versions = {"after": (args.src, args.lengths)}
    if args.baseline_src:
        versions = {"before": (args.baseline_src, args.baseline_lengths)} | versions
    plan = sorted({("prefill", int(n)) for _, lengths in versions.values() for n in lengths.split(",") if n}
                  | {("decode", int(n)) for n in args.capacities.split(",") if n})
    rows = []
    for kind, length in plan:  # before and after alternate, so both see the same load
        runs = {name: [] for name, (_, lengths) in versions.items()
                if kind == "decode" or str(length) in lengths.split(",")}
        for _ in range(args.repeat):
            for name in runs:
                runs[name].append(measure(versions[name][0], kind, length, args))
        for name, results in runs.items():
            rows.append({"code": name, "kind": kind, "length": length, **summarize(results)})
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
