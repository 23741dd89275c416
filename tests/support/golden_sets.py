"""Where the golden sets live (tests/golden, carried in the repository) and which files each must have.

The one definition of the path: conftest.py, the other support modules and the tests import it (or `golden`) from
here. A missing file is an error that names it, never a skip: a checkout without its golden data must not pass by
testing less."""

from __future__ import annotations

import functools
import json
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# The four reference sets, and the two whose targets were nudged to accept part of the draft tree.
GOLDEN_SETS = ("eagle1-llama2", "eagle1-llama3", "eagle1-qwen2", "eagle3-llama31")
ALL_GOLDEN_SETS = GOLDEN_SETS + ("eagle1-llama2-agree", "eagle3-llama31-agree")
DFLASH_GOLDEN_SETS = ("dflash-qwen3",)  # another layout (no tree): tests/runner/test_dflash_golden.py checks it
SET_FILES = ("manifest.json", "inputs.safetensors", "expected.safetensors", "tree.safetensors", "draft/config.json")


class GoldenDataMissing(FileNotFoundError):
    """A golden set or one of its files is not where the tests expect it."""


def required_files(root: Path) -> list[Path]:
    """Every file a set needs: the fixed ones, then the draft and target files its manifest.json lists."""
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise GoldenDataMissing(_message(manifest_path))
    manifest = json.loads(manifest_path.read_text())
    listed = [f"draft/{manifest['draft']['file']}"] + [f"target/{name}" for name in manifest["target"]["files"]]
    return [root / name for name in SET_FILES + tuple(listed)]


def check_golden_set(root: Path) -> Path:
    """`root` when the set is complete; GoldenDataMissing naming the first missing file otherwise."""
    for path in required_files(root):
        if not path.is_file():
            raise GoldenDataMissing(_message(path))
    return root


@functools.cache
def check_all_golden_sets(golden_root: Path = GOLDEN) -> Path:
    """Every set of ALL_GOLDEN_SETS complete under `golden_root` (checked once per process)."""
    for name in ALL_GOLDEN_SETS:
        check_golden_set(golden_root / name)
    return golden_root


def _message(path: Path) -> str:
    return (f"golden data file missing: {path}. The golden sets are part of the repository (tests/golden, see its "
            "README.md): restore it with `git checkout -- tests/golden`.")


def golden(name: str) -> Path:
    """The folder of golden set `name`; GoldenDataMissing (a failure, not a skip) when any of its files is absent."""
    return check_golden_set(GOLDEN / name)
