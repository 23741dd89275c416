"""OpenVINO GenAI speculative decoding of token-id prompts, run in .venv-openvino (`make openvino-env`).

    python openvino_spec.py TARGET_IR DRAFT_IR PROMPTS.jsonl --k 3 --max-new-tokens 32 [--taps default] [--taps 1,5,8]

Prints one JSON object: the plain greedy tokens per prompt (the pipeline without a draft), and for each --taps
variant the speculative tokens and GenAI's own counters per prompt. A --taps list is written into a copy of the draft
IR as rt_info `hidden_layers_list` (GenAI's count: the OUTPUT of layer i); `default` leaves it unset, so GenAI taps
{2, N/2, N-3} of its own. Passing the list to draft_model(...) instead fails a type check in GenAI 2026.4.1."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import openvino as ov
import openvino_genai as genai

IR = "openvino_model.xml"


def with_taps(draft: Path, taps: list[int], scratch: Path) -> Path:
    """A copy of the draft IR folder whose model carries rt_info hidden_layers_list = taps."""
    out = scratch / ("draft-" + "-".join(map(str, taps)))
    shutil.copytree(draft, out, ignore=shutil.ignore_patterns("openvino_model.xml", "openvino_model.bin"))
    model = ov.Core().read_model(draft / IR)
    model.set_rt_info(taps, "hidden_layers_list")
    ov.save_model(model, out / IR, compress_to_fp16=False)
    return out


def config(max_new_tokens: int, k: int | None) -> genai.GenerationConfig:
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = max_new_tokens
    cfg.ignore_eos = True  # every run makes the same number of tokens
    cfg.do_sample = False
    if k is not None:
        cfg.num_assistant_tokens = k
    return cfg


def inputs(ids: list[int]) -> genai.TokenizedInputs:
    return genai.TokenizedInputs(ov.Tensor(np.array([ids], dtype=np.int64)), ov.Tensor(np.ones((1, len(ids)),
                                                                                           dtype=np.int64)))


def decode(pipe: genai.LLMPipeline, prompts: list[list[int]], cfg: genai.GenerationConfig, *, counters: bool):
    runs = []
    for ids in prompts:
        result = pipe.generate(inputs(ids), cfg)
        run = {"tokens": [int(t) for t in result.tokens[0]]}
        if counters:
            metrics = result.extended_perf_metrics
            # GenAI's own counts (SDPerModelsPerfMetrics): draft tokens proposed, accepted, rejected
            run |= {"draft_tokens": int(metrics.get_num_draft_tokens()),
                    "accepted": int(metrics.get_num_accepted_tokens()),
                    "rejected": int(metrics.get_num_rejected_tokens()),
                    "generated": int(metrics.get_num_generated_tokens())}
        runs.append(run)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("draft", type=Path)
    parser.add_argument("prompts", type=Path, help="JSONL with prompt_ids")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--taps", action="append", default=[], help="'default' or comma-separated layer ids")
    args = parser.parse_args()
    prompts = [json.loads(line)["prompt_ids"] for line in args.prompts.read_text().splitlines() if line.strip()]
    out = {"openvino_genai": genai.__version__, "plain": decode(genai.LLMPipeline(args.target, "CPU"), prompts,
                                                                config(args.max_new_tokens, None), counters=False)}
    with tempfile.TemporaryDirectory() as scratch:
        for variant in args.taps or ["default"]:
            draft = args.draft if variant == "default" else with_taps(
                args.draft, [int(i) for i in variant.split(",")], Path(scratch))
            pipe = genai.LLMPipeline(args.target, "CPU", draft_model=genai.draft_model(draft, "CPU"))
            out[variant] = decode(pipe, prompts, config(args.max_new_tokens, args.k), counters=True)
            del pipe
    print(json.dumps(out))


if __name__ == "__main__":
    main()
