"""The tiny target and release-layout heads of scripts/make_tiny_vllm_pair.py (`build_releases`), for the real-vLLM
tests and the gate tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from make_tiny_vllm_pair import RELEASE_PROMPTS as PROMPTS, build_releases  # noqa: E402,F401
