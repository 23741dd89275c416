"""The OpenVINO GenAI side of `bench --engine openvino`: run as a script by the interpreter that has openvino-genai
(engines/openvino_offline.py), so it imports nothing from eagle_convert: the standard library, numpy and openvino only.

  PYTHON openvino_worker.py REPLY_FD   < one JSON command per line   (the protocol of engines/process.py)

  {"op": "start", "target": TARGET_IR, "draft": DRAFT_IR | null, "k": K, "precision": "f32" | "bf16" | ...,
   "hidden_layers_list": [...] | null}
      -> {"ok": true, "version", "device": "cpu", "precision", "start_s"}   (an LLMPipeline on CPU, with draft_model
      when given; both run in `precision`, OpenVINO's INFERENCE_PRECISION_HINT: its CPU default is bf16 where the CPU
      has it, which would not decode what an fp32 run of ours decodes). `hidden_layers_list`: an experiment
      (`bench --engine-arg hidden_layers_list=...`): a copy of the draft IR with that rt_info is loaded instead
  {"op": "generate", "ids": [...], "max_tokens", "temperature", "seed", "stop_token_ids": [...]}
      -> {"ok": true, "tokens": [...], "seconds", "rounds": [accepted per verify round] | null, "genai": {...} | null}
Any failure -> {"ok": false, "error": "Type: message"} and exit 1. End of stdin -> exit 0.

The prompt goes in as token ids (TokenizedInputs), so GenAI decodes the very ids our runner decodes. `rounds`: the
main model's tokens per step (extended_perf_metrics.main_model_metrics.raw_metrics.m_batch_sizes), after its first
step (the prompt's prefill, one token), each minus the one token the target adds itself: the accepted drafts of every
verify round. `genai`: GenAI's own counters (num draft tokens, accepted, rejected, generated) as it reports them."""

from __future__ import annotations

import json
import os
import sys
import time


class Worker:
    def __init__(self) -> None:
        self.pipe = None
        self.k = 0

    def start(self, command: dict) -> dict:
        t0 = time.perf_counter()
        import openvino_genai as genai

        draft = command.get("draft")
        if draft and command.get("hidden_layers_list") is not None:
            draft = retapped(draft, command["hidden_layers_list"])
        hint = {"INFERENCE_PRECISION_HINT": command["precision"]}
        extra = {"draft_model": genai.draft_model(draft, "CPU", **hint)} if draft else {}
        self.pipe = genai.LLMPipeline(command["target"], "CPU", **extra, **hint)
        self.k = int(command["k"]) if draft else 0
        return {"ok": True, "version": genai.__version__, "device": "cpu", "precision": command["precision"],
                "start_s": time.perf_counter() - t0}

    def config(self, request: dict):
        import openvino_genai as genai

        cfg = genai.GenerationConfig()
        cfg.max_new_tokens = request["max_tokens"]
        stop = set(request["stop_token_ids"])
        cfg.ignore_eos = not stop  # stop only at the ids the bench names (the session's EOS)
        if stop:
            cfg.stop_token_ids = stop
        cfg.do_sample = request["temperature"] > 0
        if cfg.do_sample:
            cfg.temperature = request["temperature"]
            cfg.rng_seed = request["seed"]
        if self.k:
            cfg.num_assistant_tokens = self.k
        return cfg

    def generate(self, request: dict) -> dict:
        import numpy as np
        import openvino as ov
        import openvino_genai as genai

        ids = request["ids"]
        inputs = genai.TokenizedInputs(ov.Tensor(np.array([ids], dtype=np.int64)),
                                       ov.Tensor(np.ones((1, len(ids)), dtype=np.int64)))
        t0 = time.perf_counter()
        result = self.pipe.generate(inputs, self.config(request))
        seconds = time.perf_counter() - t0
        reply = {"ok": True, "tokens": [int(t) for t in result.tokens[0]], "seconds": seconds, "rounds": None,
                 "genai": None}
        if self.k:
            metrics = result.extended_perf_metrics
            steps = [int(n) for n in metrics.main_model_metrics.raw_metrics.m_batch_sizes]
            reply["rounds"] = [n - 1 for n in steps[1:]]
            reply["genai"] = {"num_draft_tokens": int(metrics.get_num_draft_tokens()),
                              "num_accepted_tokens": int(metrics.get_num_accepted_tokens()),
                              "num_rejected_tokens": int(metrics.get_num_rejected_tokens()),
                              "num_generated_tokens": int(metrics.get_num_generated_tokens()),
                              "main_model_steps": steps}
        return reply


def retapped(draft: str, taps: list[int]) -> str:
    """A copy of the draft IR folder whose rt_info hidden_layers_list is `taps` (removed with the process's tmp)."""
    import shutil
    import tempfile
    from pathlib import Path

    import openvino as ov

    out = Path(tempfile.mkdtemp(prefix="eagle-convert-retapped-"))
    shutil.copytree(draft, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("openvino_model.*"))
    model = ov.Core().read_model(Path(draft) / "openvino_model.xml")
    model.set_rt_info([int(i) for i in taps], "hidden_layers_list")
    ov.save_model(model, out / "openvino_model.xml", compress_to_fp16=False)
    return str(out)


def main(argv: list[str]) -> int:
    reply = os.fdopen(int(argv[1]), "w", buffering=1)
    worker = Worker()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            if command["op"] == "start":
                reply.write(json.dumps(worker.start(command)) + "\n")
            elif command["op"] == "generate":
                reply.write(json.dumps(worker.generate(command)) + "\n")
            else:
                raise ValueError(f"unknown command {command['op']!r}")
    except BaseException as error:  # report, then let the caller read the log
        import traceback

        traceback.print_exc()
        reply.write(json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"}) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
