"""A real `vllm serve` for the tests (the `vllm` marker): started on a free local port in a session of its own,
stopped with its whole process group."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from support.vllm import VLLM_PYTHON


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(target, speculative_config: dict | None, log: Path, start_timeout_s: float = 600, extra=()):
    """`vllm serve` (its OpenAI api_server) on a free local port, fp32, 512 positions; `extra`: more server flags."""
    port = _free_port()
    args = [VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--host", "127.0.0.1",
            "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
            "--skip-tokenizer-init", "--seed", "0"]
    if speculative_config:
        args += ["--speculative-config", json.dumps(speculative_config)]
    args += list(extra)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + start_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stop_server(proc)
            pytest.fail(f"vllm serve ended at start: {log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=5).read()
            return proc, url
        except OSError:
            time.sleep(2)
    stop_server(proc)
    pytest.fail(f"vllm serve did not start within {start_timeout_s} s: {log.read_text()[-3000:]}")


def stop_server(proc) -> None:
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
