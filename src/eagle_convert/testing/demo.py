"""`eagle-convert demo` (api.demo): the whole user path on a built-in example, offline, in a few seconds.

It builds a tiny one-layer Llama target and an EAGLE-1 head in the SafeAILab release layout (fp32 pickle, `"bias"`
key, 2048 position limit, no LM head), inspects it, converts it for vLLM, checks every output tensor against its
source, and benches the raw and converted heads on the target: the head is built to agree with its target
(examples.py says how), so acceptance must be perfect, and a copy converted with the wrong LM head must collapse."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from ..benchmark.entry import bench
from ..checkpoint.read import read_tensor
from ..conversion.converter import convert as convert_with_settings
from ..inspection.report import inspect
from ..settings.convert import ConvertSettings
from .tiny import DEMO_CONFIG, make_eagle1_head, make_target


def convert(draft: str, target: str, out: Path, **settings):
    return convert_with_settings(draft, target, out, ConvertSettings(**settings))


DEMO_PROMPTS = [{"prompt": "t10 t11 t12 t13"}, {"prompt": "t40 t7 t99"}]


def run_demo(workdir: str | None = None, echo: Callable[[str], None] | None = print, k: int = 3) -> dict:
    say = echo or (lambda _: None)
    with tempfile.TemporaryDirectory(prefix="eagle-convert-demo-") as tmp:
        root = Path(workdir) if workdir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        target_dir, draft_dir, out_dir = root / "target", root / "draft", root / "converted-vllm-v0"
        target = make_target(target_dir, DEMO_CONFIG, zero_attention=True)
        make_eagle1_head(draft_dir, DEMO_CONFIG, target, agree=True, fc_bias=True)
        say(f"1. built a tiny Llama target ({target_dir}) and an EAGLE-1 head in the SafeAILab layout ({draft_dir})")

        report = inspect(str(draft_dir), str(target_dir))
        say(f"2. inspect: {report.layout} layout ({report.layout_reason}); {len(report.problems)} problems:")
        for p in report.problems:
            say(f"     - {p.what}")

        result = convert(str(draft_dir), str(target_dir), out_dir, to="vllm-v0", force=True)
        say(f"3. convert --to vllm-v0 -> {out_dir}: {len(result.plan.tensors)} tensors, "
            f"{result.plan.bytes_read()['target']:,} bytes read from the target")

        checked = _check_against_sources(out_dir, result)
        say(f"4. verify: {checked} output tensors equal their sources after the dtype cast; config wrapper "
            f"model_type={json.loads((out_dir / 'config.json').read_text())['model_type']!r}")

        raw = bench(str(target_dir), str(draft_dir), k=k, max_new_tokens=24, prompts=DEMO_PROMPTS, progress=False)
        conv = bench(str(target_dir), str(out_dir), k=k, max_new_tokens=24, prompts=DEMO_PROMPTS, progress=False)
        say(f"5. bench (k={k}): raw head tau={raw.mean_acceptance_length:.3f}, converted "
            f"tau={conv.mean_acceptance_length:.3f} (ideal {k + 1}); output identical to plain greedy decoding: "
            f"{conv.lossless['identical']}")
        other_dir, wrong_dir = root / "another-model", root / "converted-with-wrong-lm-head"
        make_target(other_dir, DEMO_CONFIG, seed=7, zero_attention=True)  # same shapes, different weights
        convert(str(draft_dir), str(other_dir), wrong_dir, to="vllm-v0", force=True)
        wrong = bench(str(target_dir), str(wrong_dir), k=k, max_new_tokens=24, prompts=DEMO_PROMPTS, progress=False)
        say(f"6. the same head converted against another model (wrong LM head spliced in): loads fine, but "
            f"tau={wrong.mean_acceptance_length:.3f}; `bench --min-acceptance-length 1.3` would fail it (exit 3)")
        # Today's vLLM (V1 engine) refuses vllm-v0: the same head converted --to vllm (its fc bias folded exactly).
        current_dir = root / "converted-vllm"
        current = convert(str(draft_dir), str(target_dir), current_dir, to="vllm", fc_bias="fold", force=True)
        summary = {"workdir": str(root), "tau_wrong_lm_head": wrong.mean_acceptance_length,
                   "inspect_problems": [p.what for p in report.problems],
                   "converted": str(out_dir), "tensors_checked": checked, "tau_raw": raw.mean_acceptance_length,
                   "tau_converted": conv.mean_acceptance_length, "lossless": conv.lossless["identical"],
                   "serve": result.plan.serve_command, "serve_current_vllm": current.plan.serve_command}
        say(f"serve it with vLLM 0.6-0.9 (the vllm-v0 layout): {result.plan.serve_command}")
        say(f"with today's vLLM (V1 engine), converted --to vllm --fc-bias fold into {current_dir}: "
            f"{current.plan.serve_command}")
        if not workdir:
            say("(the example lived in a temporary folder, now removed; pass --workdir DIR to keep it)")
        return summary


def _check_against_sources(out_dir: Path, result) -> int:
    """Independent of the writer's own verification: reload with safetensors and compare with the inputs."""
    checkpoints = {"draft": result.draft.checkpoint, "target": result.target.checkpoint}
    count = 0
    with safe_open(str(out_dir / "model.safetensors"), framework="pt") as f:
        for t in result.plan.tensors:
            origin, ref = t.sources[0]
            expected = read_tensor(checkpoints[origin], ref).to(t.dtype)
            if not torch.equal(f.get_tensor(t.name), expected):
                raise AssertionError(f"demo: {t.name} differs from its source")
            count += 1
    return count
