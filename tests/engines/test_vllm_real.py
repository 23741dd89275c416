"""The real pair in real vLLM (issue 17): SmolLM2-135M-Instruct and an EAGLE-3 head trained for it
(scripts/train/train_eagle3_head.py, released SafeAILab layout), converted `--to vllm` and `--to speculators`, served by
vLLM 0.32 CPU with greedy fp32 speculative decoding on the 20 held-out prompts; vLLM's counters and tokens must equal
`eagle-convert bench`'s on the raw release, prompt by prompt.

Slow (two vLLM starts on a 135M target plus a bench: 6 min at load ~2, 18 min at load 6-8 on the 2-core machine), so
it has its own target: `make test-vllm-real` builds the target and trains a short head when none is there. Without
them this module skips with the reason (CI has neither): set EAGLE_REAL_TARGET / EAGLE3_REAL_HEAD or use the default
.real/ folders.

Prompts: the first turn of each held-out prompt, rendered with the target's chat template (generation prompt added)
and passed as token ids to both sides, so that both see exactly the same ids; vLLM (through engines/vllm_worker.py,
the worker `bench --engine vllm` runs) decodes with ignore_eos, so bench does too, and both produce exactly
MAX_TOKENS tokens per prompt."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.vllm import VLLM_PYTHON, assert_same, our_counters, vllm_counters

import eagle_convert

pytestmark = [pytest.mark.vllm, pytest.mark.real]

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("EAGLE_REAL_TARGET", ROOT / ".real" / "smollm2"))
HEAD = Path(os.environ.get("EAGLE3_REAL_HEAD", ROOT / ".real" / "eagle3-smollm2"))
EVAL_PROMPTS = ROOT / "scripts" / "real" / "data" / "real_eval_prompts.jsonl"
K, MAX_TOKENS = 3, 32


@pytest.fixture(scope="module")
def real_pair(tmp_path_factory):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm-real`)")
    if not (TARGET / "model.safetensors").is_file():
        pytest.skip(f"no real target at {TARGET}: run `make test-vllm-real` (it builds it with "
                    "scripts/real/make_real_target.sh) or set EAGLE_REAL_TARGET")
    if not (HEAD / "pytorch_model.bin").is_file():
        pytest.skip(f"no trained EAGLE-3 head at {HEAD}: run `make test-vllm-real` (it trains a short one) or "
                    "scripts/train/train_eagle3_head.py, or set EAGLE3_REAL_HEAD")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(TARGET))
    prompt_ids = []
    for line in EVAL_PROMPTS.read_text().splitlines():
        first = json.loads(line)["turns"][0]
        text = tok.apply_chat_template([{"role": "user", "content": first}], tokenize=False, add_generation_prompt=True)
        prompt_ids.append(tok(text, add_special_tokens=False)["input_ids"])
    root = tmp_path_factory.mktemp("real-vllm")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt_ids": ids}) + "\n" for i, ids in enumerate(prompt_ids)))
    ours = our_counters(TARGET, HEAD, prompts, k=K, max_tokens=MAX_TOKENS)
    return {"root": root, "prompt_ids": prompt_ids, "ours": ours}


def run_vllm(real_pair, draft, **kw):
    return vllm_counters(draft, prompt_ids=real_pair["prompt_ids"], k=K, max_tokens=MAX_TOKENS,
                         max_model_len=512, **kw)


def test_real_eagle3_head_bench_accepts(real_pair):
    """What the comparisons below stand on: the trained head is really accepted on the real target."""
    ours = real_pair["ours"]
    assert len(ours) == 20 and all(len(p["tokens"]) == MAX_TOKENS for p in ours)
    drafted = sum(p["draft_tokens"] for p in ours)
    assert sum(p["accepted"] for p in ours) > 0.05 * drafted


def test_real_eagle3_head_to_vllm_same_counters_and_tokens(real_pair):
    out = real_pair["root"] / "eagle3-vllm"
    eagle_convert.convert(str(HEAD), str(TARGET), out, to="vllm", dtype="float32")
    assert_same(real_pair["ours"], run_vllm(real_pair, out, target=TARGET, method="eagle3"))


def test_real_eagle3_head_to_speculators_same_counters_and_tokens(real_pair):
    out = real_pair["root"] / "eagle3-speculators"
    eagle_convert.convert(str(HEAD), str(TARGET), out, to="speculators", dtype="float32")
    assert_same(real_pair["ours"], run_vllm(real_pair, out))
