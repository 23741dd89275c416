"""EAGLE-3 heads as SafeAILab, SpecForge and ModelOpt export them: `midlayer.*` (or `layers.0.*`), fc over three
target aux states, the draft's own `lm_head` over a draft vocabulary with `d2t`/`t2d`. Input only (SGLang reads this
layout as it is: see sglang.py)."""

from __future__ import annotations

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

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if has_layer_prefix(names, MIDLAYER):
            return "tensors named midlayer.* (EAGLE-3 release layout)"
        return None

    def source_to_canonical(self, name: str) -> str:
        return rename_prefix(name, MIDLAYER, LAYER)
