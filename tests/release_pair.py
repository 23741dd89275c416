"""Transitional: tests/test_vllm.py and test_engine_vllm.py still import `release_pair` from here; they move to
support.release_pair with the vLLM tests' own change, and this file goes then."""

from support.release_pair import PROMPTS, build_releases  # noqa: F401
