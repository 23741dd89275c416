"""Real vLLM in the tests: its interpreter, our counters and vLLM's for the same prompts (through the worker
`bench --engine vllm` runs), and the comparison every real-vLLM test makes."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path

import eagle_convert
from eagle_convert.engines.generation import add_counters, zero_counters
from eagle_convert.engines.vllm_offline import VllmOffline, llm_args
from support.release_pair import PROMPTS

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = os.environ.get("VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
K, MAX_TOKENS = 3, 24


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


def vllm_mtp_runs(target, drafts, *, prompt_ids=PROMPTS, k=1, max_tokens=MAX_TOKENS, max_model_len=256) -> list[dict]:
    """vLLM's tokens and counters per prompt for each MTP draft of one target, all in ONE worker process (vLLM is
    imported once; each draft gets its own engine, the previous one shut down). A draft is an extracted folder or the
    target itself (its own MTP layer): bench's prepare_draft makes the speculative config, with bench's LLM arguments
    (dtype auto) and the target family's CPU needs (engines/vllm_needs.py), as `bench --engine vllm` runs them."""
    import tempfile

    from eagle_convert.checkpoint.index import Checkpoint
    from eagle_convert.engines.prepare import prepare_draft
    from eagle_convert.engines.vllm_needs import cpu_needs
    from eagle_convert.io.source import LocalSource

    config = Checkpoint(LocalSource(target)).config
    common = llm_args(str(target), dtype="auto", max_model_len=max_model_len, seed=0)
    with tempfile.TemporaryDirectory() as work:
        specs = [prepare_draft(str(draft), str(target), Path(work)).speculative_config(k) for draft in drafts]
    results = []
    engine = VllmOffline(VLLM_PYTHON, {**common, "speculative_config": specs[0]}, what="vLLM (MTP)",
                         on_cpu=cpu_needs(config).for_worker(config))
    with engine:
        for i, spec in enumerate(specs):
            info = engine.start() if i == 0 else engine.restart({**common, "speculative_config": spec},
                                                                 what=f"vLLM (MTP draft {drafts[i]})")
            ran = info["speculative_config"]
            assert ran is not None and ran["method"] == "mtp" and ran["num_speculative_tokens"] == k, ran
            runs = [engine.generate(ids, max_new_tokens=max_tokens, temperature=0.0, seed=0, stop_token_ids=())
                    for ids in prompt_ids]
            results.append({"spec": spec, "outputs": [run.tokens for run in runs],
                            "per_prompt": [run.counters for run in runs], "start_s": info["start_s"],
                            "dtype": info["dtype"], "vllm_version": info["version"]})
    return results
