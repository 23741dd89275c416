"""SGLang: the draft class is chosen from `architectures` alone. EAGLE-1 -> `LlamaForCausalLMEagle` (shares the
target's embedding and LM head; its fc always has a bias, so a head without one gets explicit zeros); EAGLE-3 ->
`LlamaForCausalLMEagle3`, whose decoder layer is the module `midlayer` (so `midlayer.*` names, as released)."""

from __future__ import annotations

import re
import shlex

from ..errors import option
from ..kinds import EAGLE1, EAGLE3, EAGLE3_NAMES, LAYER
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS, TOP
from .base import (
    DerivedTensor,
    EmbeddingRule,
    Layout,
    OutputContext,
    base_inner_config,
    rename_prefix,
    written_aux_ids,
)
from .registry import register
from .vllm import eagle3_output_roles

# Where to go instead for an EAGLE-3 head SGLang cannot run as it is: vLLM reads every variant flag.
VLLM_LAYOUTS = f"{option('to', 'vllm')} or {option('to', 'speculators')}"


def sglang_eagle3_name(canonical: str) -> str:
    """Layer 0 as `midlayer.` (as released; SGLang maps it to layers.0); a later layer's input norm is SGLang's
    `hidden_norm` (its layers after the first normalise with hidden_norm(h, residual): llama_eagle3.py:103-105)."""
    m = re.fullmatch(r"layers\.([1-9]\d*)\.input_layernorm\.weight", canonical)
    if m:
        return f"layers.{m.group(1)}.hidden_norm.weight"
    return rename_prefix(canonical, LAYER, "midlayer.")


@register
class SGLang(Layout):
    name = "sglang"
    summary = "SGLang `LlamaForCausalLMEagle` / `LlamaForCausalLMEagle3` (EAGLE-3 keeps `midlayer.*`)"
    engine = "SGLang (loaded by 0.5.23's own loader, not served)"
    served_by = ("sglang",)
    output_order = 30
    detect_priority = 40
    kinds = (EAGLE1, EAGLE3)
    token_map_flag = "--speculative-token-map"  # eagle_worker.py: load_token_map, EAGLE (not EAGLE3) heads only

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        archs = config.get("architectures") or []
        if "LlamaForCausalLMEagle" in archs:
            return "architectures names LlamaForCausalLMEagle (SGLang EAGLE-1 layout)"
        return None

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        if spec.is_eagle3 and spec.norm_before_residual:
            return ("SGLang 0.5.23's LlamaForCausalLMEagle3 always takes the residual before hidden_norm "
                    "(llama_eagle3.py:97-101) and has no norm_before_residual flag, so it would run a different head; "
                    f"use {VLLM_LAYOUTS} (vLLM 0.32 reads the flag)")
        if spec.is_eagle3 and spec.fc_bias:
            return ("SGLang 0.5.23 turns on the EAGLE-3 fc bias with the config key `bias`, which also gives every "
                    "attention o_proj a bias (models/llama.py:339-340, llama_eagle3.py:166) that this head does not "
                    "have; no layout eagle-convert writes can express this head")
        if spec.is_eagle3 and spec.qk_norm:
            return ("SGLang 0.5.23 has no Qwen3-layer EAGLE-3 draft: LlamaForCausalLMEagle3's attention has no "
                    "q_norm/k_norm and its load_weights drops those tensors silently (llama_eagle3.py:325-378); "
                    f"use {VLLM_LAYOUTS} (vLLM 0.32's Eagle3Qwen3ForCausalLM)")
        if spec.qkv_bias:
            return ("SGLang's LlamaForCausalLMEagle builds q/k/v projections without bias, so this Qwen2 head's "
                    f"q/k/v biases would be dropped; use {option('to', 'vllm')} or {option('to', 'vllm-v0')}")
        return super().refusal(spec, canonical)

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        cfg = base_inner_config(spec, ctx, architecture=spec.head_kind.sglang_architecture, model_type="llama")
        if spec.head_kind.aux_states:
            # SGLang reads the aux ids from eagle_config only and adds 1 (they count layer outputs; ours count layer
            # inputs): spec_aux_hidden_state.py:186-193, models/llama.py:929-941. One convention per file: no top level.
            del cfg[TOP.key]
            CONVENTIONS["sglang-nested"].write(cfg, written_aux_ids(spec))
        return cfg

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        if spec.head_kind.aux_states:  # LlamaForCausalLMEagle3, whose layer 0 is `midlayer`
            return {sglang_eagle3_name(n): n for n in sorted(eagle3_output_roles(spec, canonical)) if n in EAGLE3_NAMES}
        return {n: n for n in sorted(canonical) if n in spec.head_kind.canonical_names and n != "lm_head.weight"}

    def derived_tensors(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, DerivedTensor]:
        # LlamaForCausalLMEagle's fc always has a bias: a head without one gets explicit zeros
        if not spec.head_kind.aux_states and "fc.bias" not in canonical:
            return {"fc.bias": DerivedTensor("fc.bias", (spec.hidden_size,))}
        return {}

    def embedding_rule(self, spec: DraftSpec, canonical: frozenset[str]) -> EmbeddingRule | None:
        """SGLang's server overwrites an EAGLE-3 draft's embed_tokens with the target's (eagle_worker_v2.py:363
        set_embed; models/llama.py:910-918) unless target_hidden_size != hidden_size: a draft embedding that differs
        is lost."""
        if not (spec.is_eagle3 and "embed_tokens.weight" in canonical and spec.target_hidden_size == spec.hidden_size):
            return None
        return EmbeddingRule(
            check="the draft's embed_tokens equals the target's on sampled rows (SGLang replaces a draft's embedding "
                  "with the target's; a difference is refused)",
            refusal="This EAGLE-3 head ships its own embed_tokens, which differs from the target's ({difference}), "
                    "and SGLang 0.5.23 replaces a draft's embedding with the target's when their widths match "
                    "(eagle_worker_v2.py:363 set_embed), so it would run a different head.",
            hint=f"Use {VLLM_LAYOUTS} (vLLM keeps a draft embedding that differs from the target's).")

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        if spec.head_kind.target_lm_head:
            return {"lm_head.weight": "SGLang shares the target's LM head with an EAGLE-1 draft"}
        return {}

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        return (f"python -m sglang.launch_server --model {shlex.quote(ctx.target_label)} "
                f"--speculative-algorithm {spec.head_kind.sglang_algorithm} "
                f"--speculative-draft-model-path {shlex.quote(ctx.out_label)} "
                f"--speculative-num-steps {ctx.num_speculative_tokens} "
                f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {ctx.num_speculative_tokens + 1}"
                + (f" {self.token_map_flag} {shlex.quote(ctx.token_map)}" if ctx.token_map else ""))

