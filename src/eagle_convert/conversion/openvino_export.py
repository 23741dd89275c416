"""`--to openvino`'s second step: the head written in the staging folder exported to OpenVINO IR by optimum-intel,
in the interpreter that has it (openvino_ir_worker.py runs there), and the IR's rt_info set (layouts/openvino.py says
what). optimum-intel pins its own transformers and torch, so it usually lives in an environment of its own: the
interpreter is --engine-python, else $OPENVINO_PYTHON, else this one when it can import openvino and optimum."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import EngineError

WORKER = Path(__file__).with_name("openvino_ir_worker.py")
PYTHON_ENV = "OPENVINO_PYTHON"
NEEDED = ("openvino", "openvino_genai", "optimum.intel")
EXPORT_TIMEOUT_S = 1800.0  # optimum-intel traces the head; ~30 s for a tiny one on a loaded 2-core CPU
INSTALL_HINT = ("Install the OpenVINO extra into an environment of its own (optimum-intel pins its own transformers): "
                "`python3 -m venv .venv-openvino && .venv-openvino/bin/pip install 'eagle-convert[openvino]'` "
                "(or `make openvino-env` in a checkout), then pass --engine-python .venv-openvino/bin/python or set "
                f"{PYTHON_ENV}; on a CPU-only machine install the CPU torch first "
                "(`pip install torch --index-url https://download.pytorch.org/whl/cpu`) and remove torchvision.")


def _imports_all(python: str) -> bool:
    probe = ("import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in "
             f"{list(NEEDED)!r}))")
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def here_has_openvino() -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in NEEDED)
    except ModuleNotFoundError:  # optimum itself absent: optimum.intel cannot be looked up
        return False


def find_openvino_python(engine_python: str | None = None, *, what: str = "--to openvino") -> str:
    """The interpreter that has openvino, openvino-genai and optimum-intel (checked without importing them here)."""
    chosen = engine_python or os.environ.get(PYTHON_ENV) or None  # an empty variable is no choice
    if chosen is None:
        if here_has_openvino():
            return sys.executable
        raise EngineError(f"{what} needs OpenVINO and optimum-intel ({', '.join(NEEDED)}), which this interpreter "
                          f"({sys.executable}) cannot import, and neither --engine-python nor {PYTHON_ENV} names "
                          "one that can.", INSTALL_HINT)
    where = "--engine-python" if engine_python else PYTHON_ENV
    if not Path(chosen).is_file() or not os.access(chosen, os.X_OK):
        raise EngineError(f"The OpenVINO interpreter {chosen} (from {where}) is not an executable file.", INSTALL_HINT)
    if not _imports_all(chosen):
        raise EngineError(f"The interpreter {chosen} (from {where}) cannot import {', '.join(NEEDED)}.", INSTALL_HINT)
    return chosen


def export_ir(staging: Path, ir_export, python: str, *, log: Path | None = None) -> dict:
    """Move the head written in `staging` into a sub-folder, export it to IR into `staging`, set the rt_info, remove
    the sub-folder. Returns what the worker reports (versions, the rt_info read back from the saved IR)."""
    source = staging / ".openvino-source"
    source.mkdir()
    for entry in list(staging.iterdir()):
        if entry != source and not entry.name.startswith("."):
            entry.rename(source / entry.name)
    args = {"source": str(source), "out": str(staging), **ir_export.to_dict()}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        done = subprocess.run([python, str(WORKER), json.dumps(args)], capture_output=True, text=True,
                              timeout=EXPORT_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as error:
        raise EngineError(f"The OpenVINO IR export did not finish within {EXPORT_TIMEOUT_S:.0f} s; it was stopped.",
                          "Retry on a less loaded machine; nothing was written.") from error
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        last = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()][-3:]
        raise EngineError(f"optimum-intel's IR export of the head failed (exit {done.returncode}): "
                          f"{' | '.join(last)[:1500]}.", "Nothing was written. Check the interpreter's pins "
                          "(scripts/engines/openvino-requirements.txt: optimum-intel 2.2.0, diffusers 0.38-0.39, "
                          "huggingface-hub < 1.22, no torchvision).")
    shutil.rmtree(source)
    return json.loads(done.stdout.strip().splitlines()[-1])
