"""The vLLM side of `bench --engine vllm`: run as a script by the interpreter that has vLLM (often another venv, with
its own torch), so it imports nothing from eagle_convert: the standard library and vllm only.

  PYTHON vllm_worker.py REPLY_FD   < one JSON command per line

Commands (stdin) and replies (one JSON line each, on file descriptor REPLY_FD: vLLM and its engine processes log to
stdout and stderr, which the caller sends to a log file):
  {"op": "start", "llm": {LLM keyword arguments}, "on_cpu": {"dtype", "llm": {...}, "refuse"} (optional)}
      -> {"ok": true, "version", "device", "dtype", "tp", "speculative_config": {method, model, num_speculative_tokens}
          | null, "start_s"}
      `on_cpu` (engines/vllm_needs.py): what the target family needs on vLLM's CPU backend, applied only there: a
      dtype in place of "auto", LLM arguments, or a refusal (the message is the error).
  {"op": "stop"} -> {"ok": true}: the engine is shut down; a next "start" builds another in the same process (the
      real-vLLM tests run two drafts of one target this way, paying the import once).
  {"op": "generate", "ids": [...], "max_tokens", "temperature", "seed", "stop_token_ids": [...]}
      -> {"ok": true, "tokens": [...], "seconds", "counters": {num_drafts, num_draft_tokens, num_accepted_tokens,
          num_accepted_tokens_per_pos}}   (the counters this one request moved; null without speculation)
  {"op": "generate_group", "batch": [[ids], ...], "max_tokens", "temperature", "seed", "stop_token_ids": [...]}
      -> {"ok": true, "seconds", "counters": {...the group's}, "outputs": [{"tokens": [...], "spec": {vLLM's
          per-request speculative_decoding metrics} | null}, ...]}   (`bench --concurrency N`: one generate call
          with N prompts, so vLLM batches them; "spec" needs per_request_spec_decode_metrics="detailed")
Any failure -> {"ok": false, "error": "Type: message"} and exit 1. End of stdin -> the engine is shut down, exit 0.
The caller's `dtype: "auto"` means float32 on vLLM's CPU backend and bfloat16 elsewhere, as bench does.

This is the one vLLM driver: the real-vLLM tests (tests/engines/test_vllm*.py) run it too, through
vllm_offline.VllmOffline, so what they check is what `bench --engine vllm` runs."""

from __future__ import annotations

import json
import os
import sys
import time

COUNTERS = {"vllm:spec_decode_num_drafts": "num_drafts", "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def read_counters(llm, k: int) -> dict:
    """vLLM's four spec-decode counters, summed over engines and labels. Called only while speculating."""
    from vllm.v1.metrics.reader import Counter, Vector

    out = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": [0] * k}
    seen = False
    for metric in llm.get_metrics():
        if metric.name in COUNTERS and isinstance(metric, Counter):
            seen = True
            out[COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POSITION and isinstance(metric, Vector):
            values = [int(v) for v in metric.values]
            if len(values) != k:  # padding or cutting it would change the per-position counts in silence
                raise RuntimeError(f"vLLM's per-position acceptance vector has {len(values)} entries, expected k={k}")
            out["num_accepted_tokens_per_pos"] = [a + b for a, b in zip(out["num_accepted_tokens_per_pos"], values)]
    if not seen:  # zeros here would read as "nothing accepted": a number nobody measured
        raise RuntimeError("vLLM exposes no spec-decode counters (they need disable_log_stats=False)")
    return out


def difference(after: dict, before: dict) -> dict:
    return {key: ([a - b for a, b in zip(after[key], before[key])] if isinstance(after[key], list)
                  else after[key] - before[key]) for key in after}


def _drafter_limit(config) -> int:
    """vLLM's own `effective_drafter_max_model_len` (v1/worker/gpu_model_runner.py:673-677): the gate's limit."""
    draft = config.speculative_config.draft_model_config
    return draft.max_model_len if draft is not None and draft.max_model_len is not None else \
        config.model_config.max_model_len


def _sampling(request: dict):
    from vllm import SamplingParams

    return SamplingParams(temperature=request["temperature"], max_tokens=request["max_tokens"], seed=request["seed"],
                          ignore_eos=True, stop_token_ids=request["stop_token_ids"], detokenize=False)


def _spec_metrics(completion) -> dict | None:
    metrics = getattr(completion, "spec_decode_metrics", None)  # per_request_spec_decode_metrics, vLLM >= 0.32
    return None if metrics is None else metrics.to_dict()


class Worker:
    def __init__(self) -> None:
        self.llm = None
        self.k = 0

    def start(self, llm_kwargs: dict, cpu_needs: dict | None = None) -> dict:
        t0 = time.perf_counter()
        import vllm
        from vllm import LLM
        from vllm.platforms import current_platform

        if self.llm is not None:
            raise RuntimeError("an engine is running: send {\"op\": \"stop\"} before starting another")
        on_cpu = current_platform.is_cpu()
        kwargs = dict(llm_kwargs)
        needs = (cpu_needs or {}) if on_cpu else {}
        if needs.get("refuse"):
            raise RuntimeError(needs["refuse"])
        if kwargs.get("dtype", "auto") == "auto":
            kwargs["dtype"] = needs.get("dtype") or ("float32" if on_cpu else "bfloat16")
        kwargs.update(needs.get("llm") or {})
        if on_cpu:
            kwargs.setdefault("enforce_eager", True)  # the CPU backend compiles nothing worth the wait here
        self.llm = LLM(**kwargs)
        start_s = time.perf_counter() - t0
        config = self.llm.llm_engine.vllm_config
        spec = config.speculative_config
        self.k = spec.num_speculative_tokens if spec is not None else 0
        return {"ok": True, "version": vllm.__version__, "device": "cpu" if on_cpu else current_platform.device_type,
                "dtype": str(config.model_config.dtype).removeprefix("torch."),
                "tp": config.parallel_config.tensor_parallel_size, "start_s": start_s,
                "drafter_max_model_len": None if spec is None else _drafter_limit(config),
                "speculative_config": None if spec is None else {
                    "method": spec.method, "model": spec.model, "num_speculative_tokens": spec.num_speculative_tokens}}

    def generate(self, request: dict) -> dict:
        reply = self.generate_group({**request, "batch": [request["ids"]]})
        return {"ok": True, "tokens": reply["outputs"][0]["tokens"], "seconds": reply["seconds"],
                "counters": reply["counters"]}

    def generate_group(self, request: dict) -> dict:
        """The prompts of `batch` in one generate call: vLLM schedules them together (the batch-wide rules apply)."""
        params = _sampling(request)
        before = read_counters(self.llm, self.k) if self.k else None
        t0 = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in request["batch"]], params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        counters = difference(read_counters(self.llm, self.k), before) if self.k else None
        return {"ok": True, "seconds": seconds, "counters": counters, "outputs": [
            {"tokens": list(out.outputs[0].token_ids), "spec": _spec_metrics(out.outputs[0])} for out in outputs]}

    def stop(self) -> None:
        if self.llm is not None:
            try:
                self.llm.llm_engine.engine_core.shutdown()
            except Exception:  # the caller ends the whole process group anyway
                pass
            self.llm, self.k = None, 0
            import gc

            gc.collect()  # the next engine's KV cache and weights need the memory back


def main(argv: list[str]) -> int:
    reply = os.fdopen(int(argv[1]), "w", buffering=1)
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    worker = Worker()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            if command["op"] == "start":
                reply.write(json.dumps(worker.start(command["llm"], command.get("on_cpu"))) + "\n")
            elif command["op"] == "stop":
                worker.stop()
                reply.write(json.dumps({"ok": True}) + "\n")
            elif command["op"] == "generate":
                reply.write(json.dumps(worker.generate(command)) + "\n")
            elif command["op"] == "generate_group":
                reply.write(json.dumps(worker.generate_group(command)) + "\n")
            else:
                raise ValueError(f"unknown command {command['op']!r}")
    except BaseException as error:  # report, then let the caller read the log for the engine's own root cause
        import traceback

        traceback.print_exc()
        reply.write(json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"}) + "\n")
        return 1
    finally:
        worker.stop()
    return 0


if __name__ == "__main__":  # vLLM spawns processes: the guard is required
    sys.exit(main(sys.argv))
