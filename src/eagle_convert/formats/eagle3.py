"""EAGLE-3 heads as SafeAILab, SpecForge and ModelOpt export them: `midlayer.*` (or `layers.0.*`), fc over three
target aux states, the draft's own `lm_head` over a draft vocabulary with `d2t`/`t2d`. Input only (SGLang reads this
layout as it is: see sglang.py)."""

from __future__ import annotations

import re

from ..spec import EAGLE3
from .base import LAYER, Layout, has_layer_prefix, rename_prefix
from .registry import register

MIDLAYER = "midlayer."


@register
class Eagle3Release(Layout):
    name = "eagle3"
    summary = "EAGLE-3 head as released by SafeAILab / SpecForge / ModelOpt (`midlayer.*`, `d2t`, `t2d`)"
    engine = "EAGLE reference code"
    detect_priority = 30
    kinds = (EAGLE3,)
    writable = False
    nested_aux_offset = 1  # SGLang lineage: eagle_config ids count layer outputs

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if has_layer_prefix(names, MIDLAYER):
            return "tensors named midlayer.* (EAGLE-3 release layout)"
        return None

    def source_to_canonical(self, name: str) -> str:
        return legacy_eagle3_name(rename_prefix(name, MIDLAYER, LAYER))


# Older SpecForge / EAGLE 3.1 exports name the per-aux-state norms by position (SGLang maps them the same way).
LEGACY_FC_NORMS = {"aux_norm_low.": "fc_norm.0.", "aux_norm_mid.": "fc_norm.1.", "aux_norm_high.": "fc_norm.2."}


def legacy_eagle3_name(name: str) -> str:
    m = re.fullmatch(r"layers\.([1-9]\d*)\.hidden_norm\.weight", name)
    if m:  # SGLang's name for a later layer's input norm (sglang.py writes it so)
        return f"layers.{m.group(1)}.input_layernorm.weight"
    for old, new in LEGACY_FC_NORMS.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name
