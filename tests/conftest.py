"""Shared fixtures: tiny checkpoints built per test in tmp dirs, and the golden sets in tests/golden."""

from __future__ import annotations

import os
from pathlib import Path

# One torch thread, here and in every command a test starts: the models are tiny, and on a loaded 2-core CI machine
# two OpenMP threads that spin-wait for each other made a bench 17x slower (1.0 s -> 17.5 s, measured).
os.environ["OMP_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from support.golden_sets import check_all_golden_sets  # noqa: E402
from support.release_pair import build_releases  # noqa: E402
from support.vllm import VLLM_PYTHON  # noqa: E402

from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target  # noqa: E402


@pytest.fixture(autouse=True)
def _golden_data_complete(request):
    # A module that reads the golden sets (it imports GOLDEN or `golden`) fails with the missing file's name before
    # its first test, instead of a KeyError deep in a loader or a silent skip. One check of all sets per session.
    if hasattr(request.module, "GOLDEN") or hasattr(request.module, "golden"):
        check_all_golden_sets()


@pytest.fixture
def pair(tmp_path):
    """Build a (target, draft) pair of tiny checkpoints; keyword arguments choose the variant."""

    def build(*, cfg: TinyConfig | None = None, shards: int = 1, target_fmt: str = "safetensors", kind: str = "eagle1",
              draft_fmt: str | None = None, **head_kwargs):
        cfg = cfg or TinyConfig()
        target_dir, draft_dir = tmp_path / "target", tmp_path / "draft"
        tensors = make_target(target_dir, cfg, shards=shards, fmt=target_fmt)
        if kind == "eagle1":
            make_eagle1_head(draft_dir, cfg, tensors, fmt=draft_fmt or "bin", **head_kwargs)
        else:
            make_eagle3_head(draft_dir, cfg, tensors, fmt=draft_fmt or "safetensors", **head_kwargs)
        return target_dir, draft_dir, tensors

    return build


@pytest.fixture(autouse=True)
def _no_hub_network(monkeypatch):
    # Tests never reach a real hub: any accidental request goes to a closed local port.
    monkeypatch.setenv("HF_ENDPOINT", os.environ.get("EAGLE_CONVERT_TEST_HF_ENDPOINT", "http://127.0.0.1:9"))


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """The tiny target and its heads in released layouts, for the real-vLLM tests (skipped without vLLM)."""
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    return build_releases(tmp_path_factory.mktemp("vllm"))
