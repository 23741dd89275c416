"""The bundled draft/verify runner: a compact Llama-family target, EAGLE-1/EAGLE-3 heads, chain speculative decoding
and acceptance metrics. `bench.run_bench` is the entry point that does I/O; everything else is pure tensor code.

The names below load on first use, so that `eagle_convert.cli.bench` (the click command, registered by the main CLI)
does not import torch for commands that never run the model."""

import importlib

_EXPORTS = {
    "bench": ("run_bench",),
    "report": ("BenchReport", "PromptReport"),
    "chat": ("ChatTokenizer",),
    "heads": ("DraftHead", "DraftOutput", "Eagle1Head", "Eagle3Head", "aux_layer_ids_for", "build_draft_head"),
    "metrics": ("AcceptanceStats", "merge_stats"),
    "model": ("SUPPORTED_ARCHITECTURES", "TargetConfig", "TargetModel", "TargetOutput"),
    "prompts": ("BUILTIN_PROMPTS", "Prompt", "load_prompts"),
    "speculate": ("SpeculativeResult", "plain_generate", "speculative_generate"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
