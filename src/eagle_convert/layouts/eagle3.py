"""EAGLE-3 heads as SafeAILab, SpecForge and ModelOpt export them: `midlayer.*` (or `layers.0.*`), fc over three
target aux states, the draft's own `lm_head` over a draft vocabulary with `d2t`/`t2d`. Input only (SGLang reads this
layout as it is: see sglang.py)."""

from __future__ import annotations

import re

from ..errors import LayoutError
from ..kinds import EAGLE3, LAYER
from .base import Layout, has_layer_prefix, rename_prefix
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
    nested_taps = "sglang-nested"  # SGLang lineage: eagle_config ids count layer outputs

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if has_layer_prefix(names, MIDLAYER):
            return "tensors named midlayer.* (EAGLE-3 release layout)"
        return None

    def source_to_canonical(self, name: str) -> str:
        return legacy_eagle3_name(rename_prefix(name, MIDLAYER, LAYER))

    def check_input(self, config: dict, label: str) -> None:
        if specforge_norm_output(config) is False:
            raise LayoutError(
                f"{label}: the config says norm_output=false, and this is a SpecForge head (`midlayer.*`, none of the "
                "keys engines read and SpecForge never writes): in SpecForge that means its logits skip the final "
                "norm (llama3_eagle.py compute_logits). vLLM, SGLang and speculators always put the logits through "
                "`norm` (their norm_output only picks the fed-back state), so every engine would run a different "
                "head.", "eagle-convert cannot write this head for any engine; retrain it with SpecForge's default "
                "norm_output: true (logits through norm), or serve it with SpecForge.")

    def flat_config(self, config: dict) -> dict:
        flat = dict(config)
        if specforge_norm_output(config) is True:
            flat["norm_output"] = False  # SpecForge's true is the engines' false: see specforge_norm_output
        return flat

    def input_notes(self, config: dict) -> tuple[str, ...]:
        if specforge_norm_output(config) is True:
            return ("SpecForge head with norm_output: true: in SpecForge that only sends the logits through `norm` "
                    "and the pre-norm state is fed back (algorithms/eagle3/model.py), which is what engines run with "
                    "norm_output: false (their true feeds back the normed state); read and written as false",)
        return ()


# Keys that engines read (vLLM llama_eagle3.py, SGLang llama_eagle3.py) and SpecForge's EAGLE-3 draft never writes
# nor reads (its fc is always 3 x target hidden; it has no input_norm): a `midlayer.*` config that states one was
# written for an engine (eagle-convert's --to sglang writes num_aux_hidden_states), so its norm_output is the engines'.
ENGINE_ONLY_KEYS = ("num_aux_hidden_states", "norm_before_fc")


def specforge_norm_output(config: dict) -> bool | None:
    """The `norm_output` a SpecForge `midlayer.*` head states at its top level (None: not stated, or not SpecForge's).

    The two meanings (sgl-project/SpecForge specforge/modeling/draft/llama3_eagle.py LlamaForCausalLMEagle3 and
    specforge/algorithms/eagle3/model.py; vllm-project/vllm vllm/model_executor/models/llama_eagle3.py
    LlamaModel.forward; sgl-project/sglang python/sglang/srt/models/llama_eagle3.py LlamaModel.forward;
    vllm-project/speculators src/speculators/models/eagle3/core.py): SpecForge always feeds back the pre-norm state
    and `norm_output` (default true) decides whether the logits go through `norm`; the engines always send the
    logits through `norm` and `norm_output` (default false) feeds back the normed state. SpecForge's true is
    therefore the engines' false, and SpecForge's false (logits without norm) has no engine equivalent."""
    nested = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    if "norm_output" not in config or any(k in config or k in nested for k in ENGINE_ONLY_KEYS):
        return None
    return bool(config["norm_output"])


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
