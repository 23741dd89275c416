"""What the conversion tests share: the CLI in a subprocess, its one-paragraph message unwrapped, what a refusal must
leave behind (nothing) and what it must not touch (the inputs' fingerprint), and a converted folder read back."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open


def run_cli(*args, env=None):
    """`python -m eagle_convert ARGS` in a fresh process: exit code, stdout and stderr apart."""
    return subprocess.run([sys.executable, "-m", "eagle_convert", *map(str, args)], capture_output=True, text=True,
                          env=env)


def flat(text: str) -> str:
    return " ".join(text.split())  # the CLI wraps its paragraph


def assert_nothing_left(out):
    """No output folder and no staging folder beside it: what a refused run must leave."""
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.eagle-convert-*")), "staging folder left behind"


def tree_fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of every file under `folder`: to prove inputs are never modified."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(folder))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out


def load_out(folder):
    """(config, tensors) of a converted folder: every *.safetensors file's tensors in one dict."""
    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            tensors.update({k: st.get_tensor(k) for k in st.keys()})
    return json.loads((folder / "config.json").read_text()), tensors
