"""vLLM V1 (`method: eagle` for EAGLE-1 heads, `method: eagle3` for EAGLE-3): raw HF configs, `layers.0.*` names.
EAGLE-1: no fc bias, no lm_head/norm/input_layernorm (the target's LM head is shared). EAGLE-3: `d2t` required when
the draft vocabulary is smaller, `norm_before_residual: false` explicit, aux layer ids explicit."""

from __future__ import annotations

from ..kinds import EAGLE1, EAGLE3, EAGLE3_NAMES
from ..spec import DraftSpec
from .base import Layout, OutputContext, base_inner_config, has_layer_prefix
from .registry import register

# EAGLE-1 tensors vLLM V1 refuses or mis-loads: the LM head and embedding come from the target.
V1_EAGLE1_EXCLUDED = {
    "lm_head.weight": "vLLM V1 shares the target's LM head (a draft lm_head.weight is a load error)",
}


@register
class VllmV1(Layout):
    name = "vllm"
    summary = "vLLM V1 `method: eagle` (EAGLE-1) / `method: eagle3` (EAGLE-3): raw config, `layers.0.*`, no fc bias"
    engine = "vLLM >= 0.10 (V1 engine; checked in 0.32)"  # V1 is the only engine from 0.10; earlier V1 not run here
    served_by = ("vllm",)
    output_order = 10
    detect_priority = 60
    kinds = (EAGLE1, EAGLE3)

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        # fc.weight, or (an EAGLE-3 head fed the last hidden state, which has no fc) layer 0's hidden_norm
        if ("fc.weight" in names or "layers.0.hidden_norm.weight" in names) and has_layer_prefix(names, "layers.0."):
            kind = "eagle3" if ("d2t" in names or "layers.0.hidden_norm.weight" in names) else "eagle"
            return f"raw config with fc.weight and layers.0.* (vLLM V1 / SpecForge `method: {kind}` layout)"
        return None

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        return eagle3_fc_bias_refusal(spec) or super().refusal(spec, canonical)

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        # vLLM's EAGLEConfig prefixes the architecture: Qwen3ForCausalLM -> Eagle3Qwen3ForCausalLM (qwen3_eagle3.py).
        arch, model_type = ("Qwen3ForCausalLM", "qwen3") if spec.qk_norm else ("LlamaForCausalLM", "llama")
        return base_inner_config(spec, ctx, architecture=arch, model_type=model_type)

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        if spec.head_kind.target_lm_head:  # EAGLE-1
            # fc.bias has no place in V1: the plan refuses, drops or folds it (--fc-bias).
            return {n: n for n in sorted(canonical)
                    if n in spec.head_kind.canonical_names and n not in V1_EAGLE1_EXCLUDED and n != "fc.bias"}
        return eagle3_names(spec, canonical)

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        return dict(V1_EAGLE1_EXCLUDED) if spec.head_kind.target_lm_head else EAGLE3_IDENTITY_D2T


# With a full draft vocabulary d2t is the identity (validate.py proves it), and vLLM refuses to load one.
EAGLE3_IDENTITY_D2T = {"d2t": "the draft vocabulary is the target's, so d2t is the identity; vLLM refuses a d2t then"}


def eagle3_names(spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
    """EAGLE-3 tensors as vLLM loads them (`layers.0.*`), without an identity d2t."""
    full_vocab = spec.draft_vocab_size == spec.vocab_size
    return {n: n for n in sorted(eagle3_output_roles(spec, canonical))
            if n in EAGLE3_NAMES and not (full_vocab and n == "d2t")}


def eagle3_output_roles(spec: DraftSpec, canonical: frozenset[str]) -> frozenset[str]:
    """The head's tensors, plus the target's LM head for a head that has none (draft_vocab_size null): written into
    the output so that no engine has to guess where it comes from."""
    return canonical | {"lm_head.weight"} if spec.lm_head_from_target else canonical


def eagle3_fc_bias_refusal(spec: DraftSpec) -> str | None:
    if spec.is_eagle3 and spec.fc_bias:
        return ("vLLM 0.32 builds the EAGLE-3 fc without a bias (llama_eagle3.py:245, bias=False) and has no flag "
                "for one, so fc.bias cannot be loaded")
    return None
