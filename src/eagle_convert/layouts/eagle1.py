"""EAGLE-1/2 heads as SafeAILab releases them (yuhuili/EAGLE-*): a plain Llama/Qwen2 config with `"bias"` (the fc
bias flag), `fc.weight` over [embedding ; feature], `layers.0.*` without an input norm, no LM head. Input only."""

from __future__ import annotations

from ..kinds import EAGLE1
from .base import Layout, has_layer_prefix
from .registry import register


@register
class Eagle1Release(Layout):
    name = "eagle1"
    summary = "EAGLE-1/2 head as released by SafeAILab (`pytorch_model.bin`, config `bias` = fc bias)"
    engine = "EAGLE reference code"
    detect_priority = 50
    kinds = (EAGLE1,)
    writable = False

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if "fc.weight" in names and has_layer_prefix(names, "layers.0.") and "lm_head.weight" not in names:
            if "bias" in config or "fc.bias" in names:
                why = "config key 'bias'" if "bias" in config else "an fc.bias tensor"
                return f"fc.weight and layers.0.* with {why} and no lm_head.weight (SafeAILab EAGLE-1 release)"
        return None
