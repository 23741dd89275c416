"""vLLM v0's EAGLE loader (vLLM 0.6-0.9, V0 engine): `{"model_type": "eagle", "model": {...}, "eagle_fc_bias": b}`
with no top-level `architectures`; the target's LM head and the embedding spliced in; fc bias kept."""

from __future__ import annotations

import shlex

from ..errors import option
from ..kinds import EAGLE1, EAGLE1_NAMES
from ..spec import DraftSpec
from .base import Layout, OutputContext, base_inner_config, vllm_serve_command
from .registry import register


@register
class VllmV0(Layout):
    name = "vllm-v0"
    summary = "vLLM v0 EAGLE wrapper (`model_type: eagle`), LM head and embedding spliced in, fc bias kept"
    engine = "vLLM 0.6-0.9 (V0 engine)"
    note = ("vLLM >= 0.10 refuses the vllm-v0 layout (its V1 engine does not load the spliced lm_head.weight): for "
            "current vLLM convert with --to vllm, or --to speculators for an EAGLE-3 head")
    output_order = 40
    detect_priority = 10
    kinds = (EAGLE1,)

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if config.get("model_type") == "eagle" and isinstance(config.get("model"), dict):
            return "config is the {'model_type': 'eagle', 'model': {...}} wrapper of vLLM v0"
        return None

    def flat_config(self, config: dict) -> dict:
        flat = dict(config["model"])
        if "eagle_fc_bias" in config:  # the wrapper's flag plays the role of SafeAILab's `bias`
            flat["bias"] = bool(config["eagle_fc_bias"])
        return flat

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        if spec.kind not in self.kinds:
            return (f"vLLM v0 had no EAGLE-3 support; use {option('to', 'vllm')} (V1, method eagle3), speculators or "
                    "sglang")
        return None

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        # Qwen2 heads carry q/k/v biases: only an inner Qwen2 architecture makes vLLM v0 create and load them.
        arch, model_type = ("Qwen2ForCausalLM", "qwen2") if spec.qkv_bias else ("LlamaForCausalLM", "llama")
        inner = base_inner_config(spec, ctx, architecture=arch, model_type=model_type)
        return {"model_type": "eagle", "model": inner, "eagle_fc_bias": spec.fc_bias}

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        # v0 never shares the embedding or LM head with the target: both must be in the file.
        return {n: n for n in sorted(canonical | {"embed_tokens.weight", "lm_head.weight"}) if n in EAGLE1_NAMES}

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        # vLLM 0.8-0.9 take the method in --speculative-config (0.8.3 removed --speculative-model, vllm#15466); 0.6-0.7
        # have only --speculative-model, and pick EAGLE from the wrapper's `model_type: eagle`, not the folder's name.
        return (f"VLLM_USE_V1=0 {vllm_serve_command(spec, ctx)}  # vLLM 0.8-0.9 (V0 engine); vLLM 0.6-0.7: "
                f"--speculative-model {shlex.quote(ctx.out_label)} --num-speculative-tokens "
                f"{ctx.num_speculative_tokens} instead")
