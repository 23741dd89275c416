"""Real llama.cpp b11434 (`make test-llamacpp`: LLAMACPP_BIN and LLAMACPP_CONVERT from
scripts/engines/llamacpp/build.sh): the tiny pair of support/engine_pair.py goes to GGUF with llama.cpp's own converter
(the head with --target-model-dir), and llama-speculative-simple runs it with --spec-type draft-eagle3. The head is
built to agree with its target in part, so llama.cpp must accept some of its drafts, and its output must be its own
plain greedy decoding's (llama-simple)."""

from __future__ import annotations

import json
import shutil

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
    return {**pair, "root": root, "target_gguf": convert(pair["target"], root / "target.gguf"),
            "head": convert(pair["eagle3"], root / "eagle3.gguf", target=pair["target"]),
            "prompts": [json.loads(line)["text"] for line in pair["prompts"].read_text().splitlines()]}


def spec_runs(pair, head) -> list[tuple[str, object]]:
    return [(prompt, speculative(pair["target_gguf"], head, prompt, k=K, max_tokens=MAX_TOKENS))
            for prompt in pair["prompts"]]


def test_an_agreeing_eagle3_head_gets_drafts_accepted_and_the_output_is_llamacpps_plain_greedy(gguf_pair):
    drafted = accepted = 0
    for prompt, (text, log) in spec_runs(gguf_pair, gguf_pair["head"]):
        counters = parse_counters(log)
        # speculative-simple stops once past -n, so it can overshoot by up to k tokens: compare with a longer plain run
        reference = plain(gguf_pair["target_gguf"], prompt, max_tokens=MAX_TOKENS + K + 1)
        assert len(text) >= MAX_TOKENS and reference.startswith(text), (text, reference)
        assert counters.n_accept == counters.acc_tokens and counters.n_accept <= counters.n_drafted
        assert f"EAGLE3 extract_layers = {TAPS}" in log and "EAGLE3 using d2t mapping" in log
        drafted, accepted = drafted + counters.n_drafted, accepted + counters.n_accept
    assert 0 < accepted < drafted, (accepted, drafted)  # partial agreement: 0 would prove nothing


def test_negative_control_the_same_head_tapping_one_layer_deeper_gets_nothing_accepted(gguf_pair):
    # the pair agrees only through taps 2, 6, 9: the comparison above could not pass with a shifted tap
    shifted = gguf_pair["root"] / "eagle3-shifted"
    shutil.copytree(gguf_pair["eagle3"], shifted)
    config = json.loads((shifted / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in TAPS]
    (shifted / "config.json").write_text(json.dumps(config))
    head = convert(shifted, gguf_pair["root"] / "eagle3-shifted.gguf", target=gguf_pair["target"])
    counters = [parse_counters(log) for _, (_, log) in spec_runs(gguf_pair, head)]
    assert sum(c.n_drafted for c in counters) > 0 and sum(c.n_accept for c in counters) == 0
