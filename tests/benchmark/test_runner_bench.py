"""run_bench end to end on tiny local pairs: the golden heads (raw release files) and an always-accepted head."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file
from support.golden_sets import GOLDEN
from support.runner_fixtures import agreeing_eagle1_head, memoryless_target, read_golden_draft, strict_getter

from eagle_convert.benchmark import session as bench_module
from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.prompts import BUILTIN_PROMPTS, Prompt, PromptFileError, load_prompts
from eagle_convert.benchmark.session import run_bench
from eagle_convert.engines import our_runner as ours_engine
from eagle_convert.errors import MissingTensorError, ShapeMismatchError, VerificationError

QUIET = dict(progress=False, device="cpu")


def golden_bench(name: str, **kwargs):
    spec, tensors = read_golden_draft(GOLDEN / name / "draft")
    return run_bench(GOLDEN / name / "target", spec, strict_getter(tensors), **{**QUIET, **kwargs})


@pytest.fixture(scope="module")
def golden_report():
    prompts = [Prompt("one", ("t5 t6 t7 t8",)), Prompt("two", ("t9 t10", "t11 t12 t13"))]
    return golden_bench("eagle3-llama31", k=3, max_new_tokens=12, prompts=prompts)


def test_report_counters_and_schema(golden_report):
    report = golden_report.to_dict()
    json.dumps(report, allow_nan=False)  # strict JSON: no NaN anywhere
    assert report["schema_version"] == 4
    assert report["settings"] | {"k": 3, "tree": {"mode": "chain", "source": "chain", "levels": 3, "nodes": 3},
                                 "dtype": "float32", "device": "cpu", "chat_template": False,
                                 "aux_layer_ids": [2, 4, 5], "draft_kind": "eagle3"} == report["settings"]
    assert report["lossless"] == {"mode": "exact", "identical": True, "diverged_prompts": []}
    prompts = report["prompts"]
    assert [p["num_turns"] for p in prompts] == [1, 2]
    overall = report["overall"]
    # overall acceptance pools every round of every prompt; recompute it independently from the histograms
    histogram = [sum(p["acceptance"]["histogram"][a] for p in prompts) for a in range(4)]
    assert overall["acceptance"]["histogram"] == histogram
    drafts, accepted = sum(histogram), sum(a * n for a, n in enumerate(histogram))
    assert overall["acceptance"]["drafts"] == drafts and overall["acceptance"]["drafted"] == 3 * drafts
    assert overall["acceptance"]["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts)
    assert overall["generated_tokens"] == sum(map(len, sum((p["output_token_ids"] for p in prompts), [])))
    assert overall["generated_tokens"] == overall["baseline_generated_tokens"]
    assert overall["speedup"] == pytest.approx(overall["tokens_per_s"] / overall["baseline_tokens_per_s"])
    for p in prompts:
        assert all(len(turn) <= 12 for turn in p["output_token_ids"]) and p["first_divergence"] is None
        assert p["wall_time_s"] > 0 and p["baseline_wall_time_s"] > 0


def test_later_turns_see_the_models_own_answer(golden_report):
    """Raw-text mode: turn 2's prompt is turn 1, the decoded answer and turn 2, joined by blank lines."""
    tokenizer = ChatTokenizer.from_dir(GOLDEN / "eagle3-llama31" / "target")
    second = golden_report.prompts[1]
    answer = tokenizer.decode([t for t in second.output_token_ids[0] if t not in tokenizer.eos_token_ids])
    expected = tokenizer.encode_text("\n\n".join(["t9 t10", answer, "t11 t12 t13"]))
    assert second.prompt_tokens == [len(tokenizer.encode_text("t9 t10")), len(expected)]
    assert len(expected) > len(tokenizer.encode_text("t9 t10 t11 t12 t13"))  # the answer really is in there


@pytest.mark.parametrize("name", ["eagle1-llama2", "eagle1-qwen2"])
def test_eagle1_golden_heads_run_with_builtin_prompts(name):
    report = golden_bench(name, k=2, max_new_tokens=6, prompts=BUILTIN_PROMPTS[:3])
    assert report.lossless["identical"] is True
    assert report.stats.drafts > 0 and len(report.prompts) == 3


def write_target_dir(path, config: dict, weights: dict):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({**config, "eos_token_id": 2}))
    save_file({name: t.contiguous() for name, t in weights.items()}, path / "model.safetensors")
    shutil.copy(GOLDEN / "eagle1-llama2" / "target" / "tokenizer.json", path / "tokenizer.json")
    return path


def test_always_accepted_head_gives_tau_k_plus_one(tmp_path):
    config, weights = memoryless_target(seed=0, vocab=512)
    spec, head_weights = agreeing_eagle1_head(config, weights, seed=0)
    target_dir = write_target_dir(tmp_path / "target", config, weights)
    report = run_bench(target_dir, spec, strict_getter(head_weights), k=4, max_new_tokens=30,
                       prompts=["t7 t8 t9", "t100"], **QUIET)
    overall = report.to_dict()["overall"]["acceptance"]
    assert overall["mean_acceptance_length"] == 5.0 and overall["acceptance_rate"] == 1.0
    assert overall["per_position_rates"] == [1.0] * 4


def test_fp32_divergence_raises_and_half_precision_reports_it(tmp_path, monkeypatch):
    config, weights = memoryless_target(seed=1, vocab=512)
    spec, head_weights = agreeing_eagle1_head(config, weights, seed=1)
    target_dir = write_target_dir(tmp_path / "target", config, weights)
    real = ours_engine.plain_generate

    def corrupted_baseline(*args, **kwargs):
        tokens = real(*args, **kwargs)
        return tokens[:3] + [(tokens[3] + 1) % 512] + tokens[4:]

    monkeypatch.setattr(ours_engine, "plain_generate", corrupted_baseline)
    run = dict(k=2, max_new_tokens=8, prompts=["t7 t8 t9"], **QUIET)
    with pytest.raises(VerificationError) as info:
        run_bench(target_dir, spec, strict_getter(head_weights), **run)
    assert info.value.report.prompts[0].first_divergence["index"] == 3
    report = run_bench(target_dir, spec, strict_getter(head_weights), dtype="bfloat16", **run)
    assert report.lossless == {"mode": "first_divergence", "identical": False, "diverged_prompts": ["1"]}
    assert report.to_dict()["prompts"][0]["first_divergence"]["index"] == 3


def test_sampling_and_no_baseline(tmp_path):
    report = golden_bench("eagle1-llama3", k=2, max_new_tokens=6, prompts=["t5 t6"], temperature=0.7, seed=3)
    assert report.lossless == {"mode": "not_checked", "identical": None, "diverged_prompts": []}
    again = golden_bench("eagle1-llama3", k=2, max_new_tokens=6, prompts=["t5 t6"], temperature=0.7, seed=3)
    assert again.prompts[0].output_token_ids == report.prompts[0].output_token_ids  # seeded: reproducible
    alone = golden_bench("eagle1-llama3", k=2, max_new_tokens=6, prompts=["t5 t6"], baseline=False).to_dict()
    assert alone["overall"]["baseline_tokens_per_s"] is None and alone["overall"]["speedup"] is None
    assert alone["lossless"]["mode"] == "not_checked"


def test_prompt_files(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"question_id": 81, "category": "writing", "turns": ["a", "b"]}\n\n{"prompt": "c"}\n')
    assert load_prompts(path) == [Prompt("81", ("a", "b"), category="writing"), Prompt("3", ("c",))]
    path.write_text('{"question_id": 1, "turns": []}\n')
    with pytest.raises(PromptFileError, match="line 1"):
        load_prompts(path)
    path.write_text("not json\n")
    with pytest.raises(PromptFileError):
        load_prompts(path)
    assert all(p.turns and p.id for p in BUILTIN_PROMPTS)
    assert len({p.id for p in BUILTIN_PROMPTS}) == len(BUILTIN_PROMPTS)


def test_mismatched_pair_is_refused():
    spec, tensors = read_golden_draft(GOLDEN / "eagle1-llama2" / "draft")
    with pytest.raises(ShapeMismatchError, match="vocab_size is 512 but the target"):
        run_bench(GOLDEN / "eagle1-llama3" / "target", spec, strict_getter(tensors), prompts=["t1"], **QUIET)


def test_target_loader_reads_shards_and_names_a_missing_tensor(tmp_path):
    target = bench_module.load_target(GOLDEN / "eagle1-llama3" / "target", dtype=torch.float32, device="cpu")
    assert target.config.num_hidden_layers == 4
    config, weights = memoryless_target(seed=0)
    del weights["model.norm.weight"]
    with pytest.raises(MissingTensorError, match="model.norm.weight"):
        bench_module.load_target(write_target_dir(tmp_path / "t", config, weights), dtype=torch.float32, device="cpu")
