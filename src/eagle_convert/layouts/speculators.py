"""The `speculators` format (vLLM reads it since 2025-08; EAGLE-3 only): a complete `transformer_layer_config`, a
`speculators_config` naming the verifier, and `norm_before_residual: false` written out (vLLM defaults it to true)."""

from __future__ import annotations

import shlex

from ..errors import option
from ..kinds import EAGLE3
from ..spec import DraftSpec
from ..taps.conventions import TOP
from .base import Layout, OutputContext, base_inner_config, eagle3_fields
from .registry import register
from .vllm import EAGLE3_IDENTITY_D2T, eagle3_fc_bias_refusal, eagle3_names


@register
class Speculators(Layout):
    name = "speculators"
    summary = "speculators `eagle3` config (`speculators_config`, full `transformer_layer_config`, verifier)"
    engine = "vLLM >= 0.10 (`vllm serve DRAFT`; checked in 0.32), speculators"
    served_by = ("vllm",)
    output_order = 20
    detect_priority = 20
    kinds = (EAGLE3,)

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if "speculators_model_type" in config:
            return f"config has speculators_model_type={config['speculators_model_type']!r}"
        return None

    def flat_config(self, config: dict) -> dict:
        flat = dict(config.get("transformer_layer_config") or {})
        for key in ("draft_vocab_size", "target_hidden_size", TOP.key,
                    "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
            if key in config:
                flat[key] = config[key]
        # vLLM reads a speculators config without the flag as true (update_eagle3: .get("norm_before_residual",
        # True)), so that is the head an engine runs, and what bench must run.
        flat.setdefault("norm_before_residual", True)
        return flat

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        if spec.kind not in self.kinds:
            return ("the speculators format describes EAGLE-3 heads only (vLLM reads no EAGLE-1 speculators "
                    f"config); use {option('to', 'vllm')} for vLLM V1 `method: eagle`")
        return eagle3_fc_bias_refusal(spec)

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        # vLLM's update_eagle3 (speculators/algos.py) copies these from the top level into the draft config; the
        # transformer_layer_config becomes that config as it is, so the aux-state count and the nested eagle_config
        # (use_aux_hidden_state) go there, and its model_type picks Eagle3LlamaForCausalLM or Eagle3Qwen3ForCausalLM.
        top_level = {k: v for k, v in eagle3_fields(spec).items() if k != "num_aux_hidden_states"}
        arch, model_type = ("Qwen3ForCausalLM", "qwen3") if spec.qk_norm else ("LlamaForCausalLM", "llama")
        layer = {k: v for k, v in base_inner_config(spec, ctx, architecture=arch, model_type=model_type).items()
                 if k not in top_level}
        verifier_arch = ctx.target_config.get("architectures") or ["LlamaForCausalLM"]
        return {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "speculators_version": "0.1.0",
            "speculators_config": {
                "algorithm": "eagle3",
                "default_proposal_method": "greedy",
                "proposal_methods": [{
                    "proposal_type": "greedy",
                    "speculative_tokens": ctx.num_speculative_tokens,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }],
                "verifier": {"name_or_path": ctx.verifier or ctx.target_label, "architectures": verifier_arch},
            },
            "transformer_layer_config": layer,
            **top_level,
            "torch_dtype": ctx.dtype_name,
        }

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        return eagle3_names(spec, canonical)

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        return EAGLE3_IDENTITY_D2T

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        # The method is in the checkpoint: vLLM reads `speculators_model_type: eagle3` from its config (not the
        # folder's name) and serves the verifier the config names.
        return (f"vllm serve {shlex.quote(ctx.out_label)}  # method eagle3 (the config's speculators_model_type); "
                f"loads the verifier named in its config: {ctx.verifier or ctx.target_label}")
