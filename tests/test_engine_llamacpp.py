"""Real llama.cpp b11434 (`make test-llamacpp`: LLAMACPP_BIN and LLAMACPP_CONVERT from
scripts/engines/llamacpp/build.sh): the tiny pair of support/engine_pair.py goes to GGUF with llama.cpp's own converter
(the head with --target-model-dir), and llama-speculative-simple runs it with --spec-type draft-eagle3. The head is
built to agree with its target in part, so llama.cpp must accept some of its drafts, and its output must be its own
plain greedy decoding's (llama-simple)."""

from __future__ import annotations

import json

import pytest
from support.engine_pair import TAPS, build_engine_pair
from support.llamacpp import LLAMACPP_BIN, LLAMACPP_CONVERT, convert, parse_counters, plain, speculative

pytestmark = pytest.mark.llamacpp
K, MAX_TOKENS = 3, 32


@pytest.fixture(scope="module")
def gguf_pair(tmp_path_factory):
    if not (LLAMACPP_BIN and LLAMACPP_CONVERT):
        pytest.skip("LLAMACPP_BIN / LLAMACPP_CONVERT are not set (run `make test-llamacpp`)")
    root = tmp_path_factory.mktemp("llamacpp")
    pair = build_engine_pair(root)
    return {"target": convert(pair["target"], root / "target.gguf"),
            "head": convert(pair["eagle3"], root / "eagle3.gguf", target=pair["target"]),
            "prompts": [json.loads(line)["text"] for line in pair["prompts"].read_text().splitlines()]}


def test_an_agreeing_eagle3_head_gets_drafts_accepted_and_the_output_is_llamacpps_plain_greedy(gguf_pair):
    drafted = accepted = 0
    for prompt in gguf_pair["prompts"]:
        text, log = speculative(gguf_pair["target"], gguf_pair["head"], prompt, k=K, max_tokens=MAX_TOKENS)
        counters = parse_counters(log)
        # speculative-simple stops once past -n, so it can overshoot by up to k tokens: compare with a longer plain run
        reference = plain(gguf_pair["target"], prompt, max_tokens=MAX_TOKENS + K + 1)
        assert len(text) >= MAX_TOKENS and reference.startswith(text), (text, reference)
        assert counters.n_accept == counters.acc_tokens and counters.n_accept <= counters.n_drafted
        assert f"EAGLE3 extract_layers = {TAPS}" in log and "EAGLE3 using d2t mapping" in log
        drafted, accepted = drafted + counters.n_drafted, accepted + counters.n_accept
    assert 0 < accepted < drafted, (accepted, drafted)  # partial agreement: 0 would prove nothing
