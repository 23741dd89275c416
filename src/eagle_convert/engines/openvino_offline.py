"""OpenVINO GenAI's LLMPipeline in the interpreter that has it (conversion/openvino_export.find_openvino_python):
one `OpenVinoOffline` is one pipeline, speculative (a draft IR) or plain (the baseline); openvino_worker.py runs
inside it. The target and the head go in as IR folders: `ir_inputs` exports the target with optimum-intel and writes
the head with `convert --to openvino` (its layers in GenAI's count), both in a temporary folder.

GenAI's counters, mapped: its per-step token counts give every verify round's accepted drafts (openvino_worker.py),
read as vLLM's four counters (generation.py) so that τ, the histogram and --compare are computed by the same code as
for every engine. GenAI's own totals (num accepted / draft tokens) leave out one verify round (measured on the engine
pair, GenAI 2026.4.1: exactly k draft tokens and one round's accepted drafts fewer than its steps show); they are
kept beside, in the report's engine block, as GenAI states them."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..conversion.openvino_export import EXPORT_TIMEOUT_S
from ..errors import EngineError
from .generation import Generation
from .process import EngineProcess

WORKER = Path(__file__).with_name("openvino_worker.py")
LOG_ENV = "EAGLE_CONVERT_ENGINE_LOG"
START_TIMEOUT_S = 900.0
GENERATE_TIMEOUT_S = 600.0
GENAI_KEYS = ("num_draft_tokens", "num_accepted_tokens", "num_rejected_tokens", "num_generated_tokens")
PRECISIONS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}  # bench --dtype -> INFERENCE_PRECISION_HINT


@dataclass
class GenAiGeneration(Generation):
    genai: dict | None = None  # GenAI's own counters for this request (GENAI_KEYS), as it reports them


def counters_from_rounds(rounds: list[int], k: int) -> dict:
    """Accepted drafts per verify round -> vLLM's counters (engines/generation.py reads them back exactly)."""
    if any(not 0 <= a <= k for a in rounds):
        raise EngineError(f"OpenVINO GenAI's steps imply {max(rounds)} accepted drafts in a round of k = {k}.",
                          "GenAI ran another number of assistant tokens than asked: check the draft IR.")
    return {"num_drafts": len(rounds), "num_draft_tokens": k * len(rounds), "num_accepted_tokens": sum(rounds),
            "num_accepted_tokens_per_pos": [sum(1 for a in rounds if a > i) for i in range(k)]}


def export_target_ir(python: str, target: Path, out: Path, weight_format: str) -> Path:
    """optimum-intel's export of the target (`optimum-cli export openvino --task text-generation-with-past`)."""
    cmd = [python, "-m", "optimum.commands.optimum_cli", "export", "openvino", "-m", str(target.resolve()), "--task",
           "text-generation-with-past", "--weight-format", weight_format, str(out.resolve())]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    except subprocess.TimeoutExpired as error:
        raise EngineError(f"optimum-intel's export of the target {target} did not finish within "
                          f"{EXPORT_TIMEOUT_S:.0f} s.", "Export it once yourself and pass it with --engine-arg "
                          "target_ir=DIR.") from error
    if done.returncode != 0:
        last = " | ".join([line for line in done.stderr.splitlines() if line.strip()][-3:])
        raise EngineError(f"optimum-intel could not export the target {target} to OpenVINO IR: {last[:1500]}.",
                          "Export it yourself (`optimum-cli export openvino -m TARGET --task "
                          "text-generation-with-past DIR`) and pass it with --engine-arg target_ir=DIR.")
    return out


class OpenVinoOffline:
    """Start with `start()`, then `generate()` prompt by prompt, and always `close()` (or use it as a context)."""

    def __init__(self, python: str, target_ir: Path, draft_ir: Path | None, *, k: int, precision: str, what: str,
                 hidden_layers_list: list[int] | None = None):
        self.python, self.what = python, what
        self.command = {"op": "start", "target": str(target_ir), "draft": str(draft_ir) if draft_ir else None,
                        "k": k, "precision": precision, "hidden_layers_list": hidden_layers_list}
        self.k = k if draft_ir else 0
        self._dir = tempfile.TemporaryDirectory(prefix="eagle-convert-openvino-")
        self._process: EngineProcess | None = None

    def start(self) -> dict:
        log = Path(os.environ.get(LOG_ENV) or Path(self._dir.name) / "engine.log")
        self._process = EngineProcess(self.python, WORKER, log, dict(os.environ), self.what)
        return self._process.request(self.command, START_TIMEOUT_S)

    def generate(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                 stop_token_ids: tuple[int, ...]) -> Generation:
        reply = self._process.request({"op": "generate", "ids": list(ids), "max_tokens": max_new_tokens,
                                       "temperature": temperature, "seed": seed,
                                       "stop_token_ids": list(stop_token_ids)}, GENERATE_TIMEOUT_S)
        counters = counters_from_rounds(reply["rounds"], self.k) if self.k else None
        return GenAiGeneration(reply["tokens"], reply["seconds"], counters, genai=reply["genai"])

    def close(self, grace_s: float = 20.0) -> None:
        if self._process is not None:
            self._process.close(grace_s=grace_s)
            self._process = None
        self._dir.cleanup()

    def __enter__(self) -> OpenVinoOffline:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(grace_s=0 if exc_type is not None else 20.0)


def genai_totals(generations) -> dict:
    """GenAI's own counters summed over a prompt's (or a run's) generations."""
    return {key: sum((g.genai or {}).get(key, 0) for g in generations) for key in GENAI_KEYS}
