"""Every local path `convert` writes into an output config, and the serve command it prints, is absolute: the
conversion runs in one folder, the engine is started from another. Repo ids stay ids."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import eagle_convert
from eagle_convert.testing.tiny import TinyConfig


def strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


def convert_here(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI run from `folder`, with relative paths, as a user in that folder types it."""
    return subprocess.run([sys.executable, "-m", "eagle_convert", "convert", *args, "--json", "-q"], cwd=folder,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("kind,to", [("eagle3", "speculators"), ("eagle3", "vllm"), ("eagle1", "vllm-v0"),
                                     ("eagle1", "sglang")])
def test_configs_and_serve_commands_hold_absolute_paths(pair, tmp_path, kind, to):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind=kind)
    work = target.parent
    proc = convert_here(work, f"./{draft.name}", "-t", f"./{target.name}", "-o", "./out", "--to", to)
    assert proc.returncode == 0, proc.stderr
    out = (work / "out").resolve()
    config = json.loads((out / "config.json").read_text())
    if to == "speculators":
        assert config["speculators_config"]["verifier"]["name_or_path"] == str(target.resolve())
    for text in strings(config):  # anything that names a file or folder names it absolutely
        if os.sep in text or text.startswith("."):
            assert Path(text).is_absolute() and Path(text).exists(), text
    serve = json.loads(proc.stdout)["serve_command"]
    words = shlex.split(serve.split("  #")[0])
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    named = [w for w in words if w.startswith("/") or w.startswith(".")]
    named += [json.loads(w)["model"] for w in words if w.startswith("{")]
    assert str(out) in named and all(Path(w).is_absolute() for w in named), serve
    assert all((elsewhere / w).exists() for w in named)  # absolute: the same folders from any cwd
    if to != "speculators":
        assert str(target.resolve()) in named


def test_a_verifier_folder_given_relatively_is_written_absolutely(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3")
    work = target.parent
    proc = convert_here(work, str(draft), "-t", str(target), "-o", "./out", "--to", "speculators",
                        "--verifier", f"./{target.name}")
    assert proc.returncode == 0, proc.stderr
    config = json.loads((work / "out" / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(target.resolve())


def test_a_repo_id_verifier_stays_an_id(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3")
    eagle_convert.convert(str(draft), str(target), tmp_path / "o", to="speculators",
                          verifier="meta-llama/Llama-3.1-8B-Instruct")
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == "meta-llama/Llama-3.1-8B-Instruct"
