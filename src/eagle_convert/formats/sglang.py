"""SGLang: the draft class is chosen from `architectures` alone. EAGLE-1 -> `LlamaForCausalLMEagle` (shares the
target's embedding and LM head; its fc always has a bias, so a head without one gets explicit zeros); EAGLE-3 ->
`LlamaForCausalLMEagle3`, whose decoder layer is the module `midlayer` (so `midlayer.*` names, as released)."""

from __future__ import annotations

import shlex

from ..spec import EAGLE1, EAGLE3, DraftSpec
from .base import EAGLE1_NAMES, EAGLE3_NAMES, LAYER, Layout, OutputContext, base_inner_config, rename_prefix
from .registry import register

ZERO_FC_BIAS = "zeros:fc.bias"  # a derived tensor: explicit zeros for SGLang's always-present fc bias


@register
class SGLang(Layout):
    name = "sglang"
    summary = "SGLang `LlamaForCausalLMEagle` / `LlamaForCausalLMEagle3` (EAGLE-3 keeps `midlayer.*`)"
    engine = "SGLang"
    detect_priority = 40
    kinds = (EAGLE1, EAGLE3)

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        archs = config.get("architectures") or []
        if "LlamaForCausalLMEagle" in archs:
            return "architectures names LlamaForCausalLMEagle (SGLang EAGLE-1 layout)"
        return None

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        if spec.qkv_bias:
            return ("SGLang's LlamaForCausalLMEagle builds q/k/v projections without bias, so this Qwen2 head's "
                    "q/k/v biases would be dropped; use --to vllm or --to vllm-v0")
        return super().refusal(spec, canonical)

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        arch = "LlamaForCausalLMEagle3" if spec.kind == EAGLE3 else "LlamaForCausalLMEagle"
        return base_inner_config(spec, ctx, architecture=arch, model_type="llama")

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        if spec.kind == EAGLE3:
            return {rename_prefix(n, LAYER, "midlayer."): n for n in sorted(canonical) if n in EAGLE3_NAMES}
        names = {n: n for n in sorted(canonical) if n in EAGLE1_NAMES and n != "lm_head.weight"}
        if "fc.bias" not in names:
            names["fc.bias"] = ZERO_FC_BIAS
        return names

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        if spec.kind == EAGLE1:
            return {"lm_head.weight": "SGLang shares the target's LM head with an EAGLE-1 draft"}
        return {}

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        algo = "EAGLE3" if spec.kind == EAGLE3 else "EAGLE"
        return (f"python -m sglang.launch_server --model {shlex.quote(ctx.target_label)} --speculative-algorithm {algo} "
                f"--speculative-draft-model-path {shlex.quote(ctx.out_label)} --speculative-num-steps {ctx.num_speculative_tokens} "
                f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {ctx.num_speculative_tokens + 1}")
