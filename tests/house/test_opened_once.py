"""A run opens each checkpoint once and passes the opened object down: convert, bench with our runner, bench with
vLLM offline (the draft converted on the way) and bench against a server, each counted by the checkpoints built
(Checkpoint.__init__), per folder."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from support.documents import write_documents
from support.fake_vllm import FakeVllmOffline

import eagle_convert
from eagle_convert.benchmark import engine_bench
from eagle_convert.checkpoint.index import Checkpoint
from eagle_convert.settings.bench import ContextSettings, EngineOptions
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target

BENCH = dict(k=2, max_new_tokens=4, ignore_eos=True, dtype="float32", device="cpu", baseline=False)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("opened-once")
    cfg = TinyConfig(num_hidden_layers=8)
    tensors = make_target(root / "target", cfg)
    make_eagle1_head(root / "eagle1", cfg, tensors)  # SafeAILab's layout: vLLM needs it converted
    make_eagle3_head(root / "eagle3", cfg, tensors, draft_vocab=96)
    eagle_convert.convert(str(root / "eagle3"), str(root / "target"), root / "eagle3-vllm", to="vllm")  # as stored
    (root / "prompts.jsonl").write_text("".join(json.dumps({"prompt_ids": ids}) + "\n" for ids in ([1, 5, 9],)))
    return {name: root / name for name in ("target", "eagle1", "eagle3", "eagle3-vllm", "prompts.jsonl")}


@pytest.fixture
def opens(monkeypatch) -> Counter:
    """How many times each folder was opened as a Checkpoint (what open_input and every direct reader build)."""
    counted: Counter = Counter()
    original = Checkpoint.__init__

    def counting(self, source):
        counted[Path(source.label).resolve().name] += 1
        original(self, source)

    monkeypatch.setattr(Checkpoint, "__init__", counting)
    return counted


class FakeOffline(FakeVllmOffline):
    """Every request drafts one round of k, accepting one token (the shared fake's defaults)."""


class FakeServer(FakeOffline):
    """A vLLM server as bench_server reads it."""

    def __init__(self, url, *, strict, warn):
        self.url, self.other_traffic = url, False
        self.spec = "the server's own"  # a server drafts with whatever it was started with: counters every request

    def open(self, k):
        return {"version": "0.0-fake", "model": "m", "k": k}


def test_convert_opens_draft_and_target_once(pair, opens, tmp_path):
    eagle_convert.convert(str(pair["eagle1"]), str(pair["target"]), tmp_path / "out", to="vllm", fc_bias="fold")
    assert (opens["eagle1"], opens["target"]) == (1, 1), opens


def test_bench_with_our_runner_opens_each_once(pair, opens):
    eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), prompts=str(pair["prompts.jsonl"]), **BENCH)
    assert (opens["eagle3"], opens["target"]) == (1, 1), opens


@pytest.mark.parametrize("draft", ["eagle1", "eagle3-vllm"])  # converted first, and served as stored
def test_bench_with_vllm_offline_opens_each_once(pair, opens, monkeypatch, draft):
    monkeypatch.setattr(engine_bench, "VllmOffline", FakeOffline)
    monkeypatch.setattr(engine_bench, "find_python", lambda given: "/fake/python")
    report = eagle_convert.bench(str(pair["target"]), str(pair[draft]), prompts=str(pair["prompts.jsonl"]),
                                 engine="vllm", **BENCH).to_dict()
    assert (report["engine"]["draft"]["conversion"] is None) == (draft == "eagle3-vllm")  # both paths were taken
    assert (opens[draft], opens["target"]) == (1, 1), opens


def test_bench_against_a_server_opens_each_once(pair, opens, monkeypatch):
    monkeypatch.setattr(engine_bench, "ServerEngine", FakeServer)
    report = eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), prompts=str(pair["prompts.jsonl"]),
                                 engine=EngineOptions(url="http://127.0.0.1:1"), **BENCH).to_dict()
    assert report["settings"]["draft_kind"] == "eagle3"  # the kind, read from the checkpoints opened once
    assert (opens["eagle3"], opens["target"]) == (1, 1), opens


def test_bench_context_lengths_opens_each_once(pair, opens, tmp_path):
    """The bench, the context block's position limits and the reference curve read the same opened checkpoints."""
    context = ContextSettings((16, 32), write_documents(tmp_path / "docs.jsonl"), per_bucket=1)
    report = eagle_convert.bench(str(pair["target"]), str(pair["eagle3-vllm"]), context=context,
                                 reference_draft=str(pair["eagle3"]), **BENCH).to_dict()
    assert report["context"]["draft_position_limit"] is not None and report["reference"] is not None  # both read
    assert (opens["eagle3-vllm"], opens["eagle3"], opens["target"]) == (1, 1, 1), opens


def test_the_count_sees_a_second_open(pair, opens):  # negative control: the counter counts
    from eagle_convert.checkpoint.open import open_input

    open_input(str(pair["eagle3"]))
    open_input(str(pair["eagle3"]))
    assert opens["eagle3"] == 2
