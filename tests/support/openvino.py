"""Real OpenVINO GenAI (2026.4.1, in .venv-openvino) in the tests: IR folders exported by optimum-intel's own exporter,
and GenAI's speculative and plain greedy decoding with its own counters (scripts/engines/openvino_spec.py, run in
OPENVINO_PYTHON; `make test-openvino` sets it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

OPENVINO_PYTHON = os.environ.get("OPENVINO_PYTHON", "")
SPEC_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "engines" / "openvino_spec.py"


def export(model: Path, out: Path, *, draft: bool = False) -> Path:
    """optimum-cli export openvino, fp32 weights. An EAGLE-3 head needs --trust-remote-code: optimum-intel injects its
    own model code for `LlamaForCausalLMEagle3`."""
    cli = Path(OPENVINO_PYTHON).parent / "optimum-cli"
    cmd = [str(cli), "export", "openvino", "-m", str(model), "--task", "text-generation-with-past",
           "--weight-format", "fp32", str(out)]
    if draft:
        cmd.insert(-1, "--trust-remote-code")
    _run(cmd)
    return out


def decode(target_ir: Path, draft_ir: Path, prompts: Path, *, k: int, max_tokens: int,
           taps: list[str] = ("default",)) -> dict:
    """{"plain": [{"tokens"}], <taps>: [{"tokens", "accepted", "generated"}]} per prompt; `taps` "default" leaves
    the draft IR's hidden_layers_list unset, "1,5,8" writes that list (GenAI's count) into a copy of it."""
    cmd = [OPENVINO_PYTHON, str(SPEC_SCRIPT), str(target_ir), str(draft_ir), str(prompts), "--k", str(k),
           "--max-new-tokens", str(max_tokens)]
    for variant in taps:
        cmd += ["--taps", variant]
    return json.loads(_run(cmd).stdout.strip().splitlines()[-1])


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout[-2000:]}\n"
                           f"{result.stderr[-4000:]}")
    return result
