"""speculators 0.9's DFlash layout (`speculators_model_type: dflash`): `transformer_layer_config`, top-level
`block_size`, `mask_token_id`, `aux_hidden_state_layer_ids` counted as the INPUT of layer i, and
`sliding_window_non_causal`, which vLLM's reader turns into `causal = not sliding_window_non_causal` (absent:
non-causal; speculators' own default false means causal). Written explicitly, so vLLM runs the head as trained."""

from __future__ import annotations

import shlex

from ..kinds import DFLASH
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS
from .base import Layout, OutputContext
from .dflash_zlab import BLOCK_KEYS, TARGET_SHARED, dflash_inner_config, dflash_names
from .registry import register

SPEC_TYPE = "dflash"


@register
class SpeculatorsDflash(Layout):
    name = "speculators-dflash"
    summary = "speculators `dflash` config (`transformer_layer_config`, aux ids counted as layer inputs, verifier)"
    engine = "vLLM `vllm serve DRAFT` (method from the config), speculators"
    served_by = ("vllm",)
    output_order = 61
    detect_priority = 10  # before `speculators`, which reads any speculators_model_type as EAGLE-3
    kinds = (DFLASH,)
    nested_taps = "speculators-dflash"

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if config.get("speculators_model_type") == SPEC_TYPE:
            return f"config has speculators_model_type={SPEC_TYPE!r}"
        return None

    def flat_config(self, config: dict) -> dict:
        flat = dict(config.get("transformer_layer_config") or {})
        row = CONVENTIONS[self.nested_taps]
        if row.read(config) is not None:
            flat[row.key] = row.read(config)
        flat[BLOCK_KEYS] = {"block_size": config.get("block_size"), "mask_token_id": config.get("mask_token_id"),
                            "causal": not config.get("sliding_window_non_causal", True)}
        return flat

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        refused = super().refusal(spec, canonical)
        last = spec.num_target_layers
        if refused is None and last is not None and last in (spec.aux_layer_ids or ()):
            return (f"it taps the output of the target's last layer ({last - 1}), which speculators' DFlash "
                    "converter drops; write --to dflash instead")
        return refused

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        verifier_arch = ctx.target_config.get("architectures") or ["LlamaForCausalLM"]
        out = {
            "architectures": ["DFlashSpeculator"], "speculators_model_type": SPEC_TYPE, "speculators_version": "0.9.0",
            "speculators_config": {
                "algorithm": SPEC_TYPE, "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": spec.block_size - 1,
                                      "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                "verifier": {"name_or_path": ctx.verifier or ctx.target_label, "architectures": verifier_arch},
            },
            "transformer_layer_config": dflash_inner_config(spec, ctx), "draft_vocab_size": spec.vocab_size,
            "block_size": spec.block_size, "mask_token_id": spec.mask_token_id,
            # vLLM: causal = not sliding_window_non_causal; speculators' default (false) would run a non-causal head
            # causal, so it is always written
            "sliding_window_non_causal": not spec.causal, "torch_dtype": ctx.dtype_name,
        }
        CONVENTIONS[self.nested_taps].write(out, spec.aux_layer_ids)
        return out

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        return dflash_names(canonical)

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        return TARGET_SHARED

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        return (f"vllm serve {shlex.quote(ctx.out_label)}  # method dflash (the config's speculators_model_type); "
                f"loads the verifier named in its config: {ctx.verifier or ctx.target_label}")
