"""Real OpenVINO GenAI 2026.4.1 (`make test-openvino`: OPENVINO_PYTHON, the .venv-openvino interpreter): the tiny pair
of support/engine_pair.py exported to IR by optimum-intel, decoded by GenAI's LLMPipeline with and without the EAGLE-3
draft. GenAI counts a tapped layer's OUTPUT where the head (like EAGLE) counts its input, so the draft IR gets rt_info
hidden_layers_list = ids - 1; with it the agreeing head must get drafts accepted, and every run's output must be
GenAI's plain greedy decoding."""

from __future__ import annotations

import pytest
from support.engine_pair import TAPS, build_engine_pair
from support.openvino import OPENVINO_PYTHON, decode, export

pytestmark = pytest.mark.openvino
K, MAX_TOKENS = 3, 32
TRANSLATED = ",".join(str(i - 1) for i in TAPS)


@pytest.fixture(scope="module")
def ir_pair(tmp_path_factory):
    if not OPENVINO_PYTHON:
        pytest.skip("OPENVINO_PYTHON is not set (run `make test-openvino`)")
    root = tmp_path_factory.mktemp("openvino")
    pair = build_engine_pair(root)
    return {"target": export(pair["target"], root / "target-ir"),
            "draft": export(pair["eagle3"], root / "eagle3-ir", draft=True), "prompts": pair["prompts"]}


def test_an_agreeing_eagle3_head_with_translated_taps_gets_drafts_accepted_losslessly(ir_pair):
    runs = decode(ir_pair["target"], ir_pair["draft"], ir_pair["prompts"], k=K, max_tokens=MAX_TOKENS,
                  taps=[TRANSLATED, "default"])
    for variant in (TRANSLATED, "default"):
        for plain, spec in zip(runs["plain"], runs[variant], strict=True):
            assert len(plain["tokens"]) == MAX_TOKENS and spec["tokens"] == plain["tokens"]
    accepted = {variant: sum(run["accepted"] for run in runs[variant]) for variant in (TRANSLATED, "default")}
    # negative control: GenAI's default {2, N/2, N-3} taps one layer deeper than the head was built on; its output
    # is still lossless, so only the counters show the loss
    assert accepted[TRANSLATED] > 0 and accepted["default"] == 0, accepted
