"""Benching MTP heads (the layer a target ships): our runner's MiMo MTP head, its refusals, and how bench hands an MTP
draft to vLLM (speculative config, the target family's CPU needs, the worker). Real vLLM:
tests/engines/test_vllm_mtp.py."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file, save_file
from support.mtp_bench import PROMPTS, extract, partial_mimo

import eagle_convert
from eagle_convert.cli.main import main
from eagle_convert.engines import vllm_worker
from eagle_convert.engines.prepare import prepare_draft
from eagle_convert.engines.vllm_needs import cpu_needs
from eagle_convert.runner import mtp_head as runner_mtp
from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target

K, MAX_TOKENS = 2, 24


@pytest.fixture(scope="module")
def mimo(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtp-bench")
    target = partial_mimo(root / "mimo")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in PROMPTS))
    return {"target": target, "extracted": extract(target, root / "mimo-vllm"), "prompts": prompts, "root": root}


def counters(target, draft, prompts) -> list[tuple]:
    report = eagle_convert.bench(str(target), str(draft), k=K, max_new_tokens=MAX_TOKENS, prompts=str(prompts),
                                 dtype="float32", device="cpu", ignore_eos=True, baseline=False).to_dict()
    assert report["settings"]["draft_kind"] == "mtp"
    return [(p["acceptance"]["drafts"], p["acceptance"]["accepted"], p["acceptance"]["per_position_rates"],
             p["output_token_ids"][0]) for p in report["prompts"]]


def bench_cli(*args):
    return CliRunner().invoke(main, ["bench", *map(str, args)])


def test_runner_extracted_mtp_head_equals_the_head_inside_the_target(mimo):
    """Prompt by prompt, the extracted folder drafts exactly what the target's own layer drafts, and the fixture
    accepts some drafts and rejects others (all or none would prove little)."""
    extracted = counters(mimo["target"], mimo["extracted"], mimo["prompts"])
    inside = counters(mimo["target"], mimo["target"], mimo["prompts"])
    assert extracted == inside
    drafts, accepted = sum(c[0] for c in inside), sum(c[1] for c in inside)
    assert 0 < accepted < K * drafts


def test_runner_feeds_the_pre_norm_state_as_vllm_does(mimo, monkeypatch):
    """vLLM's MiMo model hands the MTP layer its residual stream before the final norm. The fixture tells the two
    apart (its final norm is far from one), so the real-vLLM comparison would catch a runner that fed the other."""
    right = counters(mimo["target"], mimo["extracted"], mimo["prompts"])
    monkeypatch.setattr(runner_mtp.MtpHead, "target_feature", lambda self, out: out.hidden)
    assert counters(mimo["target"], mimo["extracted"], mimo["prompts"]) != right


def test_mtp_from_target_flag_is_the_target_as_draft(mimo):
    result = bench_cli("--target", mimo["target"], "--mtp-from-target", "-k", K, "--max-new-tokens", 8,
                       "--ignore-eos", "--prompts", mimo["prompts"], "--json", "--no-baseline")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["settings"]["draft_kind"] == "mtp"
    both = bench_cli("--target", mimo["target"], "--mtp-from-target", "--draft", mimo["extracted"])
    assert both.exit_code == 2 and "--mtp-from-target and --draft name two drafts" in both.output


@pytest.mark.parametrize("family", ["glm4_moe", "deepseek_v3", "qwen3_next"])
def test_runner_refuses_other_mtp_families_naming_the_engine(family, tmp_path):
    target = build_mtp_target(tmp_path / family, MtpFixture(family, signal=True)).path
    result = bench_cli("--target", target, "--mtp-from-target", "--prompts", tmp_path / "none.jsonl")
    assert result.exit_code == 2  # the prompts file must exist: click says so before anything else
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt_ids": PROMPTS[0]}) + "\n")
    result = bench_cli("--target", target, "--mtp-from-target", "--prompts", tmp_path / "p.jsonl")
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert f"MTP head of the {family} family" in message and "--engine vllm" in message
    assert message.count("error:") == 1


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir()
    for file in folder.iterdir():
        (to / file.name).write_bytes(file.read_bytes())
    return to


def test_an_incomplete_extraction_is_refused_by_bench(mimo, tmp_path):
    """vLLM loads an MTP layer with q_proj missing without a word (research §4.2); bench refuses it by name."""
    folder = _copy(mimo["extracted"], tmp_path / "broken")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.mtp_layers.0.self_attn.q_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    result = bench_cli("--target", mimo["target"], "--draft", folder, "--prompts", mimo["prompts"])
    assert result.exit_code == 1 and "model.mtp_layers.0.self_attn.q_proj.weight" in result.output


def test_an_mtp_folder_of_another_target_is_refused(mimo, tmp_path):
    folder = _copy(mimo["extracted"], tmp_path / "other")
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    result = bench_cli("--target", mimo["target"], "--draft", folder, "--prompts", mimo["prompts"])
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and "config is not its target's: num_hidden_layers 3" in message


def test_vllm_gets_the_mtp_method_with_the_folder_or_without_a_model(mimo, tmp_path):
    """An extracted folder is `"model": DIR`; the target's own layer is no `"model"` (vLLM's default: the target)."""
    extracted = prepare_draft(str(mimo["extracted"]), str(mimo["target"]), tmp_path)
    assert extracted.speculative_config(3) == {"method": "mtp", "model": str(mimo["extracted"].resolve()),
                                               "num_speculative_tokens": 3}
    assert extracted.conversion is None and extracted.layout_name == "mtp (mimo, extracted)"
    inside = prepare_draft(str(mimo["target"]), str(mimo["target"]), tmp_path)
    assert inside.speculative_config(1) == {"method": "mtp", "num_speculative_tokens": 1}
    assert inside.layout_name == "mtp (mimo, inside the target)"


def test_cpu_needs_of_the_target_families_are_data(tmp_path):
    qwen3_next = {"model_type": "qwen3_next"}
    assert cpu_needs(qwen3_next).for_worker(qwen3_next) == {
        "dtype": "bfloat16", "llm": {"enable_prefix_caching": False}, "refuse": None}
    deepseek = {"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    assert cpu_needs(deepseek).for_worker(deepseek) == {"dtype": "bfloat16", "llm": {}, "refuse": None}
    small = dict(deepseek, kv_lora_rank=32, qk_rope_head_dim=16)
    assert "latent of 576" in cpu_needs(small).for_worker(small)["refuse"]
    plain = {"model_type": "qwen2"}
    assert cpu_needs(plain).for_worker(plain) == {"dtype": None, "llm": {}, "refuse": None}


class _FakeLLM:
    made: list[dict] = []

    def __init__(self, **kwargs):
        _FakeLLM.made.append(kwargs)
        spec = kwargs.get("speculative_config")
        spec_config = None if spec is None else types.SimpleNamespace(
            method=spec["method"], model=spec.get("model"), num_speculative_tokens=spec["num_speculative_tokens"],
            draft_model_config=None)  # the worker reads vLLM's drafter limit from it (None: the target's)
        config = types.SimpleNamespace(speculative_config=spec_config, model_config=types.SimpleNamespace(
            dtype=kwargs["dtype"], max_model_len=kwargs.get("max_model_len")),
            parallel_config=types.SimpleNamespace(tensor_parallel_size=1))
        self.llm_engine = types.SimpleNamespace(vllm_config=config,
                                                engine_core=types.SimpleNamespace(shutdown=lambda: None))


def _fake_vllm(monkeypatch, on_cpu: bool):
    vllm = types.ModuleType("vllm")
    vllm.__version__, vllm.LLM = "0.0-fake", _FakeLLM
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: on_cpu, device_type="cuda")
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    _FakeLLM.made = []


def test_the_worker_applies_cpu_needs_only_on_the_cpu_and_runs_engines_in_turn(monkeypatch):
    needs = {"dtype": "bfloat16", "llm": {"enable_prefix_caching": False}, "refuse": None}
    spec = {"method": "mtp", "num_speculative_tokens": 1}
    _fake_vllm(monkeypatch, on_cpu=True)
    worker = vllm_worker.Worker()
    info = worker.start({"model": "t", "dtype": "auto", "speculative_config": spec}, needs)
    assert _FakeLLM.made[-1]["dtype"] == "bfloat16" and _FakeLLM.made[-1]["enable_prefix_caching"] is False
    assert info["speculative_config"] == {"method": "mtp", "model": None, "num_speculative_tokens": 1}
    with pytest.raises(RuntimeError, match="send .*stop"):
        worker.start({"model": "t", "dtype": "auto"}, needs)
    worker.stop()
    worker.start({"model": "t", "dtype": "float32"}, needs)  # an explicit dtype is the user's: kept
    assert _FakeLLM.made[-1]["dtype"] == "float32" and worker.k == 0
    worker.stop()
    with pytest.raises(RuntimeError, match="latent of 576"):
        worker.start({"model": "t", "dtype": "auto"}, dict(needs, refuse="the CPU MLA kernel needs a latent of 576"))
    _fake_vllm(monkeypatch, on_cpu=False)
    vllm_worker.Worker().start({"model": "t", "dtype": "auto"}, dict(needs, refuse="cpu only"))
    assert _FakeLLM.made[-1]["dtype"] == "bfloat16" and "enable_prefix_caching" not in _FakeLLM.made[-1]


def test_drop_does_not_apply_to_an_mtp_head(mimo):
    result = bench_cli("--target", mimo["target"], "--draft", mimo["extracted"], "--drop", "*q_proj*",
                       "--prompts", mimo["prompts"])
    assert result.exit_code == 1 and "--drop does not apply to the MTP head" in " ".join(result.output.split())
