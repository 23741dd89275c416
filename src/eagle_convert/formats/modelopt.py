"""EAGLE-3 heads as NVIDIA ModelOpt saves them before export: every tensor under `eagle_module.` (its decoder layer as
`midlayer.*` or `layers.N.*`) and the flags in a nested `eagle_config`, often next to target keys copied to the top
level (`num_hidden_layers`, `tie_word_embeddings`). Input only: the variant flags are read from eagle_config by
variants.py, and the copied target keys are overruled by the tensors and said."""

from __future__ import annotations

from ..spec import EAGLE3
from .base import LAYER, Layout, has_layer_prefix, rename_prefix
from .eagle3 import MIDLAYER, legacy_eagle3_name
from .registry import register

PREFIX = "eagle_module."


@register
class ModelOpt(Layout):
    name = "modelopt"
    summary = "EAGLE-3 head saved by NVIDIA ModelOpt (`eagle_module.*`, flags in a nested `eagle_config`)"
    engine = "NVIDIA ModelOpt (training side)"
    detect_priority = 25
    kinds = (EAGLE3,)
    writable = False
    nested_aux_offset = 1  # SGLang lineage: eagle_config ids count layer outputs

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if has_layer_prefix(names, PREFIX):
            return "tensors named eagle_module.* (ModelOpt EAGLE-3 checkpoint)"
        return None

    def source_to_canonical(self, name: str) -> str:
        return legacy_eagle3_name(rename_prefix(rename_prefix(name, PREFIX, ""), MIDLAYER, LAYER))

    def input_notes(self, config: dict) -> tuple[str, ...]:
        return ("ModelOpt checkpoint: the `eagle_module.` prefix removed; EAGLE-3 flags read from the nested "
                "eagle_config as well as the top level",)
