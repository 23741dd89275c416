"""Where the bench runner's time goes (issue 3, performance). A benchmark, not a test.

1. Overhead: on a ~135M-parameter target (SmolLM2-135M's shape, random weights) with a random EAGLE-1 head, the
   fraction of speculative wall time spent outside target and head forwards (the Python loop, acceptance, sampling,
   bookkeeping). Goal: < 10 % on CPU.
2. Efficiency: on the same shape, built so that a head is always accepted (attention outputs and every MLP after the
   first are zero, so the target is a function of the current token at the full cost of its 30 layers; examples.py
   explains the construction), measured speedup over plain decoding divided by the ideal speedup computed from the
   measured cost of one decode step, one verify of k+1 tokens and the head's steps in a round (medians of the calls
   inside real runs):
       ideal = (k+1) * t_decode / (t_verify(k+1) + t_head(k+1 rows) + (k-1) * t_head(1 row)).

Usage: python scripts/bench/bench_runner.py [--device cpu|cuda] [--dtype float32|bfloat16] [-k 3] [--tokens 128]
       [--threads N] [--update-doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from eagle_convert.benchmark.session import load_target
from eagle_convert.checkpoint.index import Checkpoint
from eagle_convert.draft.load import load_draft, tensor_reader
from eagle_convert.io.source import LocalSource
from eagle_convert.runner.heads import HeadModule, build_draft_head
from eagle_convert.runner.model import TargetModel
from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

SMOLLM2_SHAPE = TinyConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                           intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True)
MARK = ("<!-- bench_runner:start -->", "<!-- bench_runner:end -->")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def load_pair(folder: Path, cfg: TinyConfig, *, agree: bool, dtype, device):
    tensors = make_target(folder / "target", cfg, zero_attention=agree)
    make_eagle1_head(folder / "draft", cfg, tensors, agree=agree, fc_bias=False)
    del tensors
    head_info = load_draft(Checkpoint(LocalSource(folder / "draft")), {})
    target = load_target(folder / "target", dtype=dtype, device=device)
    head = build_draft_head(head_info.spec, tensor_reader(head_info), target_embedding=target.embed_weight,
                            target_lm_head=target.lm_head_weight, dtype=dtype, device=device)
    params = sum(t.numel() for t in (target.embed_weight, target.lm_head_weight)) if not cfg.tie_word_embeddings \
        else target.embed_weight.numel()
    params += cfg.num_hidden_layers * (2 * cfg.hidden_size ** 2 + 2 * cfg.hidden_size * cfg.num_key_value_heads
                                       * (cfg.hidden_size // cfg.num_attention_heads) + 3 * cfg.hidden_size
                                       * cfg.intermediate_size)
    return target, head, params


class ForwardClock:
    """Wraps TargetModel.__call__ and HeadModule.__call__ to record (who, rows, seconds) for every call."""

    def __init__(self, device):
        self.device, self.calls = device, []
        self.saved = (TargetModel.__call__, HeadModule.__call__)

    @property
    def seconds(self) -> float:
        return sum(c[2] for c in self.calls)

    def median(self, who: str, rows: int) -> float:
        return statistics.median(c[2] for c in self.calls if c[0] == who and c[1] == rows)

    def __enter__(self):
        clock = self

        def timed(fn, who):
            def wrapper(obj, ids, *a, **kw):
                sync(clock.device)
                start = time.perf_counter()
                out = fn(obj, ids, *a, **kw)
                sync(clock.device)
                clock.calls.append((who, ids.shape[1], time.perf_counter() - start))
                return out
            return wrapper

        TargetModel.__call__ = timed(self.saved[0], "target")
        HeadModule.__call__ = timed(self.saved[1], "head")
        return self

    def __exit__(self, *exc):
        TargetModel.__call__, HeadModule.__call__ = self.saved


def timed(fn, device, repeat=5):
    out = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - start)
    return statistics.median(out)


def prompt_ids(vocab: int, n: int = 32) -> list[int]:
    g = torch.Generator().manual_seed(0)
    return [1] + torch.randint(3, vocab, (n - 1,), generator=g).tolist()


def overhead(target, head, k, tokens, device) -> dict:
    ids = prompt_ids(target.config.vocab_size)
    speculative_generate(target, head, ids, k=k, max_new_tokens=8)  # warm-up
    with ForwardClock(device) as clock:
        sync(device)
        start = time.perf_counter()
        result = speculative_generate(target, head, ids, k=k, max_new_tokens=tokens)
        sync(device)
        wall = time.perf_counter() - start
    return {"wall_s": wall, "forward_s": clock.seconds, "outside_fraction": 1 - clock.seconds / wall,
            "rounds": len(result.accepted_per_round), "tokens": len(result.tokens)}


def efficiency(target, head, k, tokens, device) -> dict:
    ids = prompt_ids(target.config.vocab_size)
    speculative_generate(target, head, ids, k=k, max_new_tokens=8)  # warm-up
    plain_generate(target, ids, max_new_tokens=8)
    t_spec = timed(lambda: speculative_generate(target, head, ids, k=k, max_new_tokens=tokens), device, 3)
    t_plain = timed(lambda: plain_generate(target, ids, max_new_tokens=tokens), device, 3)
    # Component costs measured inside real runs (same cache sizes and positions), in separate instrumented runs.
    with ForwardClock(device) as clock:
        result = speculative_generate(target, head, ids, k=k, max_new_tokens=tokens)
        plain_generate(target, ids, max_new_tokens=tokens)
    assert set(result.accepted_per_round) == {k}, "the always-accepted head was not always accepted"
    t_decode, t_verify = clock.median("target", 1), clock.median("target", k + 1)
    t_head1, t_headk = clock.median("head", 1), clock.median("head", k + 1)
    ideal = (k + 1) * t_decode / (t_verify + t_headk + (k - 1) * t_head1)
    measured = t_plain / t_spec  # the same number of tokens in both
    return {"spec_tok_s": tokens / t_spec, "plain_tok_s": tokens / t_plain, "measured_speedup": measured,
            "ideal_speedup": ideal, "ratio": measured / ideal, "t_decode_ms": 1e3 * t_decode,
            "t_verify_ms": 1e3 * t_verify, "t_head1_ms": 1e3 * t_head1, "t_headk_ms": 1e3 * t_headk}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("-k", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--update-doc", type=Path, help="write the results into this markdown file's bench_runner section")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    with tempfile.TemporaryDirectory() as tmp:
        target, head, params = load_pair(Path(tmp) / "o", SMOLLM2_SHAPE, agree=False, dtype=dtype, device=device)
        over = overhead(target, head, args.k, args.tokens, device)
        del target, head
        target, head, params_eff = load_pair(Path(tmp) / "e", SMOLLM2_SHAPE, agree=True, dtype=dtype, device=device)
        eff = efficiency(target, head, args.k, args.tokens, device)
    machine = f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    if device.type == "cuda":
        machine += f", {torch.cuda.get_device_name()}"
    command = "python scripts/bench/bench_runner.py " + " ".join(sys.argv[1:])
    rows = [
        f"Command: `{command}` ({device.type}, {str(dtype).removeprefix('torch.')}, k={args.k}, "
        f"{args.tokens} new tokens; "
        f"{machine}; load average at start "
        f"{open('/proc/loadavg').read().split()[0] if Path('/proc/loadavg').exists() else '?'})",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| overhead: target {params / 1e6:.0f}M params (SmolLM2-135M shape), random head: wall / in forwards | "
        f"{over['wall_s']:.2f} s / {over['forward_s']:.2f} s over {over['rounds']} rounds |",
        f"| **fraction of wall time outside target and head forwards** (goal < 10 %) | "
        f"**{100 * over['outside_fraction']:.1f} %** |",
        f"| always-accepted head, same {params_eff / 1e6:.0f}M shape: spec / plain tok/s | "
        f"{eff['spec_tok_s']:.1f} / {eff['plain_tok_s']:.1f} |",
        f"| costs: decode step / verify of k+1 / head 1 row / head k+1 rows | {eff['t_decode_ms']:.2f} / "
        f"{eff['t_verify_ms']:.2f} / {eff['t_head1_ms']:.2f} / {eff['t_headk_ms']:.2f} ms |",
        f"| measured speedup / ideal speedup | {eff['measured_speedup']:.2f} / {eff['ideal_speedup']:.2f} |",
        f"| **measured / ideal** | **{eff['ratio']:.2f}** |",
    ]
    text = "\n".join(rows)
    print(text)
    if args.update_doc:
        update_section(args.update_doc, f"### {device.type.upper()} {str(dtype).removeprefix('torch.')}", text)


def update_section(path: Path, heading: str, body: str) -> None:
    """Replace (or add) the `heading` block inside the bench_runner markers of `path`."""
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    if MARK[0] not in doc:
        doc += f"\n## Runner (issue 3)\n\n{MARK[0]}\n{MARK[1]}\n"
    head, rest = doc.split(MARK[0], 1)
    section, tail = rest.split(MARK[1], 1)
    blocks = [b for b in section.split("\n### ") if b.strip()]
    blocks = [b if b.startswith("### ") else "### " + b for b in blocks]
    blocks = [b for b in blocks if not b.startswith(heading)] + [f"{heading}\n\n{body}\n"]
    path.write_text(f"{head}{MARK[0]}\n" + "\n".join(b.rstrip() + "\n" for b in blocks) + f"{MARK[1]}{tail}")


if __name__ == "__main__":
    main()
