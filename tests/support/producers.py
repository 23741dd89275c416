"""The producers' own selection functions, run in the tests (SpecForge 0.2.0, speculators 0.9.0).

`make producers` installs both wheels with `pip install --no-deps --target .producers` (pinned, from PyPI). Their
modules import heavy packages at import time that the pure functions never use (SpecForge's preprocessing.py:
`datasets`, `transformers`, its distributed groups; speculators' vocab_mapping.py: `datasets`, `transformers`), so
importing them would need those whole stacks. Instead the one function is taken from the installed file, unchanged
(its source text by `ast`), and executed with exactly the names it uses (`Counter`, `torch`, typing). Nothing is
re-typed: the code under comparison is the producer's own bytes."""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
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


def _installed(relative: str) -> Path:
    path = PRODUCERS / relative
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make producers` (installs specforge==0.2.0 and speculators==0.9.0 "
                    "with --no-deps into .producers/).")
    package = relative.split("/")[0]
    assert (PRODUCERS / f"{package}-{VERSIONS[package]}.dist-info").is_dir(), \
        f"{PRODUCERS} holds another {package} than {VERSIONS[package]}: run `make producers`"
    return path


def functions_from(relative: str, names: tuple[str, ...], namespace: dict) -> dict:
    """The named top-level functions of an installed producer file, their source unchanged, run in `namespace`."""
    path = _installed(relative)
    nodes = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in nodes} == set(names), f"{path} no longer defines {names}"
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)  # noqa: S102 - the producer's own code
    return namespace


def producer_function(name: str):
    namespace = {"Counter": Counter, "torch": torch, "Tuple": tuple}  # Tuple: SpecForge's return annotation
    return functions_from(SOURCES[name], (name,), namespace)[name]


def specforge_parser_module():
    """SpecForge's data/parse.py (GeneralParser: render, truncate, loss mask) with its template.py, loaded as files:
    they need only torch, transformers and pydantic, but `specforge.data`'s package import pulls the training stack."""
    _installed("specforge/data/parse.py")
    package = types.ModuleType("_specforge_data")
    package.__path__ = [str(PRODUCERS / "specforge" / "data")]
    sys.modules.setdefault("_specforge_data", package)
    for name in ("template", "parse"):
        full = f"_specforge_data.{name}"
        if full not in sys.modules:
            spec = importlib.util.spec_from_file_location(full, PRODUCERS / "specforge" / "data" / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[full] = module
            spec.loader.exec_module(module)
    return sys.modules["_specforge_data.parse"]


def speculators_boundary_rows(encode_render):
    """speculators' `_render_boundary_rows` (one row per assistant turn, masked after the generation prompt), its
    own code, with `_encode_render` (a vLLM /render request in speculators) supplied by the test."""
    namespace = {"_encode_render": encode_render, "BoundaryRow": dict, "BoundaryUnstableError": ValueError}
    names = ("_render_boundary_rows", "_common_prefix_len")
    return functions_from("speculators/data_generation/preprocessing.py", names, namespace)["_render_boundary_rows"]
