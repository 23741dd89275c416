"""llama.cpp (b11434, `--spec-type draft-dflash`): `--to gguf` for a DFlash head, one GGUF file with the keys and
tensor names llama.cpp's own converter writes for it (conversion/qwen.py `DFlashModel`, a Qwen3Model with
`general.architecture = dflash`; the loader is src/models/dflash.cpp). `--to gguf` is one layout (layouts/gguf.py
writes EAGLE-3 heads): `GgufLayout` below routes a DFlash head here and everything else to gguf.py.

What differs from the z-lab safetensors: llama.cpp's tensor names, 1-D norms kept F32 (as the converter keeps them), no
q/k permutation (Qwen3 ropes NeoX-style in llama.cpp, as in HF), `dflash.target_layers` counted as the INPUT of layer i
(the converter writes `target_layer_ids + 1`; taps row `gguf-dflash`), and `dflash.attention.causal` always written
(the converter writes it only when the config states it; llama.cpp defaults to non-causal).

The vocabulary: llama.cpp reads the mask token only through the draft's own vocabulary (llama_vocab_mask), and its
converter copies the target's whole tokenizer into the draft for that (`--target-model-dir`). eagle-convert does not
rebuild llama.cpp's tokenizer tables from the HF target: it copies the `tokenizer.*` keys of the target's own GGUF
(`--target-gguf`, the file served with `-m`, checked to be this target's: conversion/target_gguf.py), the draft's mask
id kept. Without it the file states `tokenizer.ggml.model = none` and the mask id, and the conversion warns: b11434
drops the mask id with `none` and aborts at the first draft ("failed to add token")."""

from __future__ import annotations

import re
import shlex

from ..kinds import DFLASH
from ..rope.types import rope_type_of
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS
from .base import OutputContext, Rewrite, TargetVocabulary, output_limit
from .dflash_zlab import TARGET_SHARED
from .gguf import FILE_TYPES, Gguf
from .registry import register

ARCH = "dflash"
GGUF_FILE = "dflash.gguf"
# canonical DFlash name -> llama.cpp's tensor name (gguf-py MODEL_TENSOR names for MODEL_ARCH.DFLASH)
TOP_NAMES = {"fc.weight": "fc.weight", "hidden_norm.weight": "enc.output_norm.weight",
             "norm.weight": "output_norm.weight"}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_LAYER = re.compile(r"layers\.(\d+)\.(.+)")


def gguf_name(canonical: str) -> str | None:
    """llama.cpp's name for a canonical DFlash tensor (None: llama.cpp has no place for it)."""
    if canonical in TOP_NAMES:
        return TOP_NAMES[canonical]
    found = _LAYER.fullmatch(canonical)
    if found and found.group(2) in LAYER_NAMES:
        return f"blk.{found.group(1)}.{LAYER_NAMES[found.group(2)]}"
    return None


def dflash_metadata(spec: DraftSpec, ctx: OutputContext) -> dict:
    """The GGUF metadata, key -> [GGUF type name, value], as llama.cpp's converter writes it for this head."""
    return {
        "general.architecture": ["STRING", ARCH],
        "general.type": ["STRING", "model"],
        "general.name": ["STRING", "DFlash"],  # the converter names it after the folder: cosmetic
        "dflash.block_count": ["UINT32", spec.num_layers],
        "dflash.context_length": ["UINT32", output_limit(spec, ctx)],
        "dflash.embedding_length": ["UINT32", spec.hidden_size],
        "dflash.feed_forward_length": ["UINT32", spec.intermediate_size],
        "dflash.attention.head_count": ["UINT32", spec.num_attention_heads],
        "dflash.attention.head_count_kv": ["UINT32", spec.num_key_value_heads],
        "dflash.rope.freq_base": ["FLOAT32", spec.rope_theta],
        "dflash.attention.layer_norm_rms_epsilon": ["FLOAT32", spec.rms_norm_eps],
        "dflash.attention.key_length": ["UINT32", spec.head_dim],
        "dflash.attention.value_length": ["UINT32", spec.head_dim],
        "general.file_type": ["UINT32", FILE_TYPES[ctx.dtype_name]],
        "dflash.block_size": ["UINT32", spec.block_size],
        "dflash.target_layers": ["ARRAY[INT32]", CONVENTIONS["gguf-dflash"].to_stored(spec.aux_layer_ids)],
        # explicit, false included: llama.cpp runs a DFlash draft non-causal unless the file says otherwise
        "dflash.attention.causal": ["BOOL", bool(spec.causal)],
        "general.quantization_version": ["UINT32", 2],
        **vocabulary_keys(ctx.target_vocabulary),
        "tokenizer.ggml.mask_token_id": ["UINT32", spec.mask_token_id],  # the draft's own, over any the target has
    }


def vocabulary_keys(vocabulary: TargetVocabulary | None) -> dict:
    """The target GGUF's tokenizer.* keys, or `none` when it was not given (module doc)."""
    if vocabulary is None:
        return {"tokenizer.ggml.model": ["STRING", "none"]}
    return {key: list(typed) for key, typed in vocabulary.keys.items()}


def vocabulary_warning(ctx: OutputContext) -> tuple[str, ...]:
    if ctx.target_vocabulary is not None:
        return ()
    return (f"{GGUF_FILE} holds no vocabulary: llama.cpp cannot run it (it aborts at the first draft, \"failed to add "
            "token\") until the target's is copied in; convert again with --target-gguf TARGET.gguf, the target's GGUF "
            "that llama-server loads with -m",)


def dflash_inexpressible(spec: DraftSpec) -> str | None:
    """Why llama.cpp b11434 cannot run this DFlash head as trained (src/models/dflash.cpp, conversion/qwen.py)."""
    reasons = [
        (spec.hidden_act != "silu",
         f"the head's MLP uses {spec.hidden_act}; llama.cpp's DFlash converter writes no activation key, so its "
         "loader would run it as SiLU"),
        (spec.qkv_bias, "llama.cpp's DFlash attention has no q/k/v bias"),
        (spec.fc_bias, "llama.cpp's DFlash fc has no bias"),
        (spec.target_hidden_size not in (None, spec.hidden_size),
         f"llama.cpp feeds fc {len(spec.aux_layer_ids or ())} x the draft's width ({spec.hidden_size}); this head's "
         f"target states are {spec.target_hidden_size} wide"),
        (rope_type_of(spec.rope_scaling) != "default",
         f"the head's RoPE scaling ({rope_type_of(spec.rope_scaling)}) is not written to GGUF (not checked here)"),
    ]
    return next((why for refused, why in reasons if refused), None)


def dflash_serve_command(spec: DraftSpec, ctx: OutputContext) -> str:
    k, draft = spec.block_size - 1, shlex.quote(f"{ctx.out_label}/{GGUF_FILE}")
    if ctx.target_vocabulary is not None:
        target, first = shlex.quote(ctx.target_vocabulary.file), ""
    else:
        target = "TARGET.gguf"
        first = (f"python convert_hf_to_gguf.py {shlex.quote(ctx.target_label)} --outfile {target}  # llama.cpp's "
                 f"converter, for the target\n# llama.cpp cannot run {draft} as written (no vocabulary): convert "
                 f"again with --target-gguf {target} first\n")
    return (f"{first}llama-server -m {target} -md {draft} --spec-type draft-dflash --spec-draft-n-max {k}\n"
            f"# or: llama-speculative-simple -m {target} -md {draft} --spec-type draft-dflash --spec-draft-n-max {k} "
            "-p PROMPT")


@register
class GgufLayout(Gguf):
    """`--to gguf`: EAGLE-3 heads as layouts/gguf.py writes them, DFlash heads as this module does."""

    kinds = Gguf.kinds + (DFLASH,)
    summary = Gguf.summary + "; DFlash: `general.architecture = dflash`, `dflash.target_layers`"
    engine = "llama.cpp (b11434, `--spec-type draft-eagle3` / `draft-dflash`)"

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        if spec.kind != DFLASH:
            return super().refusal(spec, canonical)
        unnamed = sorted(n for n in canonical if gguf_name(n) is None and n not in TARGET_SHARED)
        if unnamed:
            return f"llama.cpp's DFlash model has no tensor for {', '.join(unnamed[:3])}"
        return dflash_inexpressible(spec)

    def takes_target_vocabulary(self, spec: DraftSpec) -> bool:
        return spec.kind == DFLASH  # an EAGLE-3 draft runs on the target's own vocabulary (layouts/gguf.py)

    def output_warnings(self, spec: DraftSpec, ctx: OutputContext) -> tuple[str, ...]:
        return vocabulary_warning(ctx) if spec.kind == DFLASH else super().output_warnings(spec, ctx)

    def gguf_file_for(self, spec: DraftSpec) -> str | None:
        return GGUF_FILE if spec.kind == DFLASH else super().gguf_file_for(spec)

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        return dflash_metadata(spec, ctx) if spec.kind == DFLASH else super().output_config(spec, ctx)

    def flat_config(self, config: dict) -> dict:
        arch = config.get("general.architecture", ["STRING", None])[1]
        if arch != ARCH:
            return super().flat_config(config)
        value = {key: v[1] for key, v in config.items()}
        return {"max_position_embeddings": value.get("dflash.context_length"),
                "rope_theta": value.get("dflash.rope.freq_base"), "num_hidden_layers": value.get("dflash.block_count")}

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        if spec.kind != DFLASH:
            return super().output_names(spec, canonical)
        return {gguf_name(n): n for n in sorted(canonical) if gguf_name(n)}

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        return TARGET_SHARED if spec.kind == DFLASH else super().dropped_reasons(spec)

    def rewrites(self, spec: DraftSpec) -> dict[str, Rewrite]:
        return {} if spec.kind == DFLASH else super().rewrites(spec)  # Qwen3: NeoX RoPE in both, no permutation

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        return dflash_serve_command(spec, ctx) if spec.kind == DFLASH else super().serve_command(spec, ctx)
