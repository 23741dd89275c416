"""bench --concurrency N without vLLM: the prompts sent in groups (offline: one generate call per group; server: N
concurrent requests), vLLM's per-request metrics read as counters, and the rounds its batch-wide position gate ran
with drafting disabled, reconstructed from per-step counts and checked against the dummy-zero drafts
(engines/vllm_batch.py). The real rule in real vLLM: test_vllm_concurrency.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from support.fake_vllm import FakeVllmOffline

from eagle_convert.cli.main import main
from eagle_convert.engines.generation import Generation, stats_from_counters
from eagle_convert.engines.vllm_batch import (
    PER_GROUP,
    PER_REQUEST,
    RequestSteps,
    counters_from_metrics,
    disabled_rounds,
    group_generations,
)
from eagle_convert.engines.vllm_server import ServerEngine
from eagle_convert.errors import EngineError, IncomparableReportError
from eagle_convert.runner.draft_gate import drafts_fit
from eagle_convert.runner.metrics import AcceptanceStats
from eagle_convert.settings.bench import EngineOptions
from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head, make_target

K, LIMIT = 3, 128


def request(prompt_len: int, accepted: list[int], token=5) -> RequestSteps:
    """A request whose rounds accepted `accepted`; its output tokens all `token` (0: what dummy drafts accept)."""
    produced = 1 + sum(a + 1 for a in accepted)
    return RequestSteps(prompt_len, [token] * produced, accepted, [K] * len(accepted))


# --- the batch-wide rule, reconstructed ----------------------------------------------------------------------------

def test_a_short_request_drafts_alone_and_not_beside_a_long_one():
    short = request(64, [3, 3, 2, 3])
    assert disabled_rounds([short], K, LIMIT) == [0]
    # beside a request already past the limit, every round of both ran on dummy zeros (accepting none of them)
    short_batched, long = request(64, [0, 0, 0, 0]), request(200, [0, 0, 0, 0])
    assert disabled_rounds([short_batched, long], K, LIMIT) == [4, 4]
    # once the long one has finished, the batch is the short one alone again: it drafts
    short_outlives, long_short_lived = request(64, [0, 0, 3, 3]), request(200, [0])
    assert disabled_rounds([short_outlives, long_short_lived], K, LIMIT) == [2, 1]
    assert disabled_rounds([short_batched, long], K, None) == [0, 0]  # no limit known: nothing disabled


def test_alone_the_reconstruction_is_our_runners_single_request_rule():
    accepted = [3] * 7 + [0] * 6  # crosses the limit: round 7 verifies up to 128 tokens, 128 + k > 128
    lone = request(100, accepted)
    seen, expected, done = 100, 0, 100
    for a in accepted:  # runner/draft_gate.py: the round drafts when the previous step's sequence + k fits
        expected += not drafts_fit(seen, K, LIMIT)
        seen = done + 1 + K
        done += a + 1
    assert disabled_rounds([lone], K, LIMIT) == [expected] and expected == 6


def test_a_disabled_round_that_accepted_a_real_token_is_not_counted_but_refused():
    """Negative control: dummy zeros accept only token id 0. A round reconstructed as disabled that accepted another
    token drafted after all (the reconstruction does not hold): the share is None, never a guess."""
    short, long = request(64, [2, 0]), request(200, [0, 0])
    assert disabled_rounds([short, long], K, LIMIT) is None
    zeros = request(64, [2, 0], token=0)
    assert disabled_rounds([zeros, long], K, LIMIT) == [2, 2]


def test_a_request_whose_tokens_are_not_its_rounds_breaks_the_lockstep_check():
    odd = RequestSteps(64, [0] * 9, [0, 0], [K, K])  # 2 rounds produce 3 tokens, not 9: a step without a round
    assert disabled_rounds([odd, request(200, [0, 0])], K, LIMIT) is None


# --- counters -------------------------------------------------------------------------------------------------------

def spec_metrics(accepted: list[int]) -> dict:
    histogram = [accepted.count(j) for j in range(K + 1)]
    return {"acceptance_histogram": histogram, "num_draft_tokens": K * len(accepted), "num_spec_steps": len(accepted),
            "per_step_accepted": accepted, "per_step_drafted": [K] * len(accepted)}


def test_per_request_metrics_read_as_the_engine_counters_of_that_request():
    accepted = [0, 3, 1, 2, 2, 0, 3, 1]
    counters = counters_from_metrics(K, spec_metrics(accepted))
    assert counters == {"num_drafts": 8, "num_draft_tokens": 24, "num_accepted_tokens": 12,
                        "num_accepted_tokens_per_pos": [6, 4, 2]}
    assert stats_from_counters(K, counters) == AcceptanceStats.from_accepted(K, accepted)


def test_a_group_reports_per_request_counters_checked_against_the_group_counters():
    batch = [[1] * 64, [1] * 200]
    short, long = [0, 0, 0], [0, 0, 0]
    outputs = [([0] * 4, spec_metrics(short)), ([0] * 4, spec_metrics(long))]
    group = {"num_drafts": 6, "num_draft_tokens": 18, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": [0] * 3}
    outs, scope = group_generations(K, LIMIT, batch, outputs, 2.0, group)
    assert scope == PER_REQUEST and [o.disabled_rounds for o in outs] == [3, 3] and [o.seconds for o in outs] == [1, 1]
    assert [o.counters["num_drafts"] for o in outs] == [3, 3]
    with pytest.raises(EngineError, match="do not add up"):  # negative control: counts that disagree are refused
        group_generations(K, LIMIT, batch, outputs, 2.0, {**group, "num_drafts": 7})
    without = [(tokens, None) for tokens, _ in outputs]  # a server without per-request metrics: per group
    outs, scope = group_generations(K, LIMIT, batch, without, 2.0, group)
    assert scope == PER_GROUP and outs[0].counters == group and outs[1].counters["num_drafts"] == 0
    assert [o.disabled_rounds for o in outs] == [None, None]
    outs, _ = group_generations(K, LIMIT, batch, outputs, 2.0, group, limit_known=False)
    assert [o.disabled_rounds for o in outs] == [None, None]


# --- the bench, grouped ---------------------------------------------------------------------------------------------

class GroupingVllm(FakeVllmOffline):
    """Records each call's batch; a group's requests draft 2 rounds each, one of them with drafting disabled."""
    calls: list = []
    counters_scope = PER_REQUEST

    def generate_group(self, batch, **request):
        type(self).calls.append((self.spec is not None, len(batch)))
        outs = [self.generate(ids, **request) for ids in batch]
        return [Generation(o.tokens, o.seconds, o.counters, disabled_rounds=None if o.counters is None else 1)
                for o in outs]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("concurrency-pair")
    cfg = TinyConfig(num_hidden_layers=8)
    make_eagle3_head(root / "eagle3", cfg, make_target(root / "target", cfg), draft_vocab=96)
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt_ids": [1, 5 + i, 9]}) + "\n" for i in range(3)))
    return {"target": root / "target", "eagle3": root / "eagle3", "prompts": prompts}


def test_bench_sends_the_prompts_in_groups_and_reports_the_disabled_share(pair, monkeypatch):
    import eagle_convert
    from eagle_convert.benchmark import engine_bench

    GroupingVllm.calls = []
    monkeypatch.setattr(engine_bench, "VllmOffline", GroupingVllm)
    monkeypatch.setattr(engine_bench, "find_python", lambda given: "/fake/python")
    data = eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), engine=EngineOptions(concurrency=2),
                               prompts=str(pair["prompts"]), k=2, max_new_tokens=6, ignore_eos=True).to_dict()
    # 3 prompts in groups of 2: [2, 1], for the speculative engine and again for its baseline twin
    assert GroupingVllm.calls == [(True, 2), (True, 1), (False, 2), (False, 1)]
    load = data["engine"]["concurrency"]
    assert load["requests"] == 2 and load["counters"] == PER_REQUEST
    assert load["drafting_disabled_rounds"] == 3 and load["drafting_disabled_share"] == 3 / 3
    assert data["engine"]["llm_args"]["max_num_seqs"] == 4
    assert [p["drafting_disabled_rounds"] for p in data["prompts"]] == [1, 1, 1]
    assert data["lossless"]["identical"]


def test_concurrency_is_refused_with_our_runner_and_with_compare(pair):
    base = ["bench", "-t", str(pair["target"]), "-d", str(pair["eagle3"]), "--prompts", str(pair["prompts"])]
    alone = CliRunner().invoke(main, [*base, "--concurrency", "2"])
    assert alone.exit_code == 2 and "--concurrency applies to an engine" in alone.output
    compared = CliRunner().invoke(main, [*base, "--engine", "vllm", "--compare", "--concurrency", "2"])
    assert compared.exit_code == 2 and "one request at a time" in compared.output


class FakeServer(ServerEngine):
    """/metrics and /v1/completions answered in process: every request drafts 2 rounds of K accepting nothing."""

    def __init__(self, per_request: bool):
        super().__init__("http://fake", strict=True, warn=print)
        self.model, self.per_request, self.done, self.sent = "m", per_request, 0, []

    def metrics(self) -> dict:
        return {"num_drafts": 2 * self.done, "num_draft_tokens": 2 * K * self.done, "num_accepted_tokens": 0,
                "per_pos": {i: 0 for i in range(K)}, "finished": self.done, "spec": True}

    def _complete(self, ids, max_new_tokens, temperature, seed, stop_token_ids):
        self.sent.append(len(ids))
        self.done += 1
        return [0, 0, 0], spec_metrics([0, 0]) if self.per_request else None


def test_a_server_gets_the_group_as_concurrent_requests():
    server = FakeServer(per_request=True)
    server.draft_limit, server.draft_limit_known = LIMIT, True
    outs = server.generate_group([[1] * 64, [1] * 200], max_new_tokens=3, temperature=0.0, seed=0, stop_token_ids=())
    assert sorted(server.sent) == [64, 200] and server.counters_scope == PER_REQUEST
    assert [o.counters["num_drafts"] for o in outs] == [2, 2] and [o.disabled_rounds for o in outs] == [2, 2]
    server = FakeServer(per_request=False)
    outs = server.generate_group([[1] * 64, [1] * 200], max_new_tokens=3, temperature=0.0, seed=0, stop_token_ids=())
    assert server.counters_scope == PER_GROUP and outs[0].counters["num_drafts"] == 4


def test_the_load_is_a_setting_a_stored_report_must_share(pair, monkeypatch):
    """A τ measured at --concurrency 2 is not the τ of one request at a time: the report's settings say the load, and
    a stored report of the other load is refused (absent means 1, as in reports written before the flag)."""
    import eagle_convert
    from eagle_convert.benchmark import engine_bench, gates

    GroupingVllm.calls = []
    monkeypatch.setattr(engine_bench, "VllmOffline", GroupingVllm)
    monkeypatch.setattr(engine_bench, "find_python", lambda given: "/fake/python")
    loaded = eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), engine=EngineOptions(concurrency=2),
                                 prompts=str(pair["prompts"]), k=2, max_new_tokens=6, ignore_eos=True).to_dict()
    alone = eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), engine=EngineOptions(),
                                prompts=str(pair["prompts"]), k=2, max_new_tokens=6, ignore_eos=True).to_dict()
    assert loaded["settings"]["concurrency"] == 2 and "concurrency" not in alone["settings"]
    gates.check_settings(alone["schema_version"], alone["settings"], alone, "same.json")  # control: same load passes
    with pytest.raises(IncomparableReportError, match=r"concurrency 1 \(now 2\)"):
        gates.check_settings(loaded["schema_version"], loaded["settings"], alone, "alone.json")
    with pytest.raises(IncomparableReportError, match=r"concurrency 2 \(now 1\)"):
        gates.check_settings(alone["schema_version"], alone["settings"], loaded, "loaded.json")


def test_concurrency_is_refused_with_context_lengths(pair):
    """A group of N prompts could span two --context-lengths buckets: the per-bucket τ would mix loads."""
    result = CliRunner().invoke(main, ["bench", "-t", str(pair["target"]), "-d", str(pair["eagle3"]), "--engine",
                                       "vllm", "--context-lengths", "256", "--concurrency", "2"])
    assert result.exit_code == 2 and "--context-lengths benches one bucket at a time" in result.output
