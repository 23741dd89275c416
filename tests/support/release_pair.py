"""The tiny target and release-layout heads of eagle_convert.testing.vllm_pairs (`build_releases`), for the real-vLLM
tests and the gate tests."""

from __future__ import annotations

from eagle_convert.testing.vllm_pairs import RELEASE_PROMPTS as PROMPTS  # noqa: F401
from eagle_convert.testing.vllm_pairs import build_releases  # noqa: F401
