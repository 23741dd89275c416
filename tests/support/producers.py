"""The producers' own selection functions, run in the tests (SpecForge 0.2.0, speculators 0.9.0).

`make producers` installs both wheels with `pip install --no-deps --target .producers` (pinned, from PyPI). Their
modules import heavy packages at import time that the pure functions never use (SpecForge's preprocessing.py:
`datasets`, `transformers`, its distributed groups; speculators' vocab_mapping.py: `datasets`, `transformers`), so
importing them would need those whole stacks. Instead the one function is taken from the installed file, unchanged
(its source text by `ast`), and executed with exactly the names it uses (`Counter`, `torch`, typing). Nothing is
re-typed: the code under comparison is the producer's own bytes."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
import torch

PRODUCERS = Path(__file__).resolve().parents[2] / ".producers"
SOURCES = {
    "process_token_dict_to_mappings": "specforge/data/preprocessing.py",
    "build_vocab_mappings_from_distribution": "speculators/train/vocab_mapping.py",
}
VERSIONS = {"specforge": "0.2.0", "speculators": "0.9.0"}


def producer_function(name: str):
    path = PRODUCERS / SOURCES[name]
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make producers` (installs specforge==0.2.0 and speculators==0.9.0 "
                    "with --no-deps into .producers/).")
    package = SOURCES[name].split("/")[0]
    dist = PRODUCERS / f"{package}-{VERSIONS[package]}.dist-info"
    assert dist.is_dir(), f"{PRODUCERS} holds another {package} than {VERSIONS[package]}: run `make producers`"
    source = path.read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"Counter": Counter, "torch": torch, "Tuple": tuple}  # Tuple: its return annotation
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102 - the producer's own code
    return namespace[name]
