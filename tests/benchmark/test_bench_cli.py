"""bench through the format layer and the CLI: raw and converted heads agree exactly, the CI gate, the demo."""

from __future__ import annotations

import json

import pytest
from support.convert import run_cli

import eagle_convert
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target

PROMPTS = ["t10 t11 t12", "t40 t7 t99 t3"]


def comparable(report) -> dict:
    """Everything in a report except timings."""
    d = report.to_dict()
    return {"acceptance": d["overall"]["acceptance"], "lossless": d["lossless"],
            "outputs": [p["output_token_ids"] for p in d["prompts"]],
            "per_prompt": [p["acceptance"] for p in d["prompts"]]}


def bench(target, draft, **kw):
    kw.setdefault("k", 3)
    return eagle_convert.bench(str(target), str(draft), max_new_tokens=16, prompts=PROMPTS, **kw)


@pytest.mark.parametrize("kind,layouts", [("eagle1", ["vllm-v0", "vllm", "sglang"]),
                                          ("eagle3", ["vllm", "speculators", "sglang"])])
def test_raw_and_converted_heads_give_identical_reports(kind, layouts, tmp_path):
    cfg = TinyConfig(num_hidden_layers=8 if kind == "eagle3" else 2)
    tensors = make_target(tmp_path / "target", cfg)
    if kind == "eagle1":
        make_eagle1_head(tmp_path / "raw", cfg, tensors, fc_bias=False)
    else:
        make_eagle3_head(tmp_path / "raw", cfg, tensors, draft_vocab=96)
    raw = comparable(bench(tmp_path / "target", tmp_path / "raw"))
    assert raw["lossless"]["identical"] is True
    for to in layouts:
        eagle_convert.convert(str(tmp_path / "raw"), str(tmp_path / "target"), tmp_path / to, to=to)
        assert comparable(bench(tmp_path / "target", tmp_path / to)) == raw, to


def test_folded_fc_bias_gives_the_same_acceptance(tmp_path):
    cfg = TinyConfig()
    tensors = make_target(tmp_path / "target", cfg)
    make_eagle1_head(tmp_path / "raw", cfg, tensors, fc_bias=True)
    eagle_convert.convert(str(tmp_path / "raw"), str(tmp_path / "target"), tmp_path / "v1", to="vllm", fc_bias="fold")
    raw, folded = bench(tmp_path / "target", tmp_path / "raw"), bench(tmp_path / "target", tmp_path / "v1")
    assert comparable(folded)["outputs"] == comparable(raw)["outputs"]
    assert folded.stats.histogram == raw.stats.histogram


def test_cli_json_gate_and_exit_codes(tmp_path):
    cfg = TinyConfig(num_hidden_layers=1)
    tensors = make_target(tmp_path / "target", cfg, zero_attention=True)
    make_eagle1_head(tmp_path / "agree", cfg, tensors, agree=True)
    make_target(tmp_path / "other", cfg, seed=9, zero_attention=True)
    eagle_convert.convert(str(tmp_path / "agree"), str(tmp_path / "other"), tmp_path / "wrong")  # wrong LM head
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 81, "turns": ["t5 t6", "t8"]}) + "\n"
                       + json.dumps({"prompt": "t9 t10 t11"}) + "\n")
    common = ["bench", "--target", tmp_path / "target", "-k", "4", "--max-new-tokens", "12", "--prompts", prompts,
              "--json", "--min-acceptance-length", "1.3"]
    good = run_cli(*common, "--draft", tmp_path / "agree")
    assert good.returncode == 0, good.stderr
    data = json.loads(good.stdout)
    acc = data["overall"]["acceptance"]
    assert acc["mean_acceptance_length"] == 5.0 and acc["acceptance_rate"] == 1.0
    assert acc["per_position_rates"] == [1.0, 1.0, 1.0, 1.0]
    assert data["lossless"] == {"mode": "exact", "identical": True, "diverged_prompts": []}
    assert [p["id"] for p in data["prompts"]] == ["81", "2"] and data["prompts"][0]["num_turns"] == 2
    assert data["gate"]["min_acceptance_length"] == 1.3 and data["gate"]["passed"] is True
    checks = [(c["name"], c["passed"], c["tau"]) for c in data["gate"]["checks"]]
    assert checks == [("min_acceptance_length", True, 5.0)]
    for key in ("tokens_per_s", "baseline_tokens_per_s", "speedup", "wall_time_s", "generated_tokens"):
        assert data["overall"][key] is not None
    bad = run_cli(*common, "--draft", tmp_path / "wrong")
    assert bad.returncode == 3
    assert json.loads(bad.stdout)["overall"]["acceptance"]["mean_acceptance_length"] < 1.3
    assert "below --min-acceptance-length" in " ".join(bad.stderr.split())
    human = run_cli("bench", "--target", tmp_path / "target", "--draft", tmp_path / "agree", "--max-new-tokens", "8")
    assert human.returncode == 0 and "overall" in human.stdout and "lossless" in human.stdout


def test_bench_needs_a_local_target(tmp_path):
    result = run_cli("bench", "--target", "org/not-here", "--draft", tmp_path)
    assert result.returncode == 1 and "local folder" in " ".join(result.stderr.split())


def test_demo_runs_offline_and_shows_both_outcomes():
    from eagle_convert.cli.demo_command import run_demo

    summary = run_demo(echo=None)
    assert summary["tau_raw"] == summary["tau_converted"] == 4.0
    assert summary["lossless"] is True and summary["tau_wrong_lm_head"] < 1.3
    assert summary["tensors_checked"] == 12
    # the serve command for today's vLLM too (vllm-v0 is refused by vLLM >= 0.10), naming its method
    assert '"method": "eagle"' in summary["serve_current_vllm"] and "/converted-vllm" in summary["serve_current_vllm"]
    assert '"method": "eagle"' in summary["serve"]
