"""The report's `settings` block, built by one function for every engine (what a bench is asked: settings/bench.py)."""

from __future__ import annotations

from ..runner.trees.shapes import TreeShape
from ..settings.bench import DecodeSettings


def report_settings(target: str, shape: TreeShape, decode: DecodeSettings, *, device, dtype, use_template: bool,
                    baseline: bool, num_prompts: int, draft_kind: str, aux_layer_ids, text_only: bool = False,
                    token_map: dict | None = None, concurrency: int = 1) -> dict:
    """The report's `settings` (schema in session.py), the same keys whichever engine ran, so reports, gates and
    --reference-report compare across engines."""
    return {"target": target, "k": shape.levels, "tree": shape.to_dict(), "max_new_tokens": decode.max_new_tokens,
            "temperature": decode.temperature, "seed": decode.seed, "device": device, "dtype": dtype,
            "chat_template": use_template, "baseline": baseline, "ignore_eos": decode.ignore_eos,
            "num_prompts": num_prompts, **({"text_only": True} if text_only else {}), "draft_kind": draft_kind,
            "aux_layer_ids": aux_layer_ids, **({"token_map": token_map} if token_map else {}),
            **({"concurrency": concurrency} if concurrency > 1 else {})}  # absent = 1, as in reports before it
