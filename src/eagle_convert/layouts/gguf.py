"""llama.cpp (b11434, `--spec-type draft-eagle3`): one GGUF file holding the EAGLE-3 head, with the keys and tensor
names llama.cpp's own converter writes for it (`convert_hf_to_gguf.py` -> conversion/llama.py, gguf-py constants;
the loader is src/models/eagle3.cpp). Written from the head's safetensors directly: no llama.cpp tree needed.

What differs from a safetensors layout: q/k rows are permuted the way llama.cpp's Llama converter permutes them (its
RoPE pairs rotate adjacent elements, HF's rotate halves), `d2t` is written as ABSOLUTE target ids in I64 (the loader
reads `d2t[i]` as the target token of draft token i; HF stores offsets i -> d2t[i] + i), 1-D norms stay F32 (as the
converter keeps them), and `eagle3.target_layers` is written through the taps table (`gguf`: the input of layer i,
as vLLM counts). The tokenizer keys: the loader requires only `tokenizer.ggml.model`, and the EAGLE-3 speculator
never reads the draft's vocabulary (it drafts in the target's tokens through d2t and compares no vocabularies), so
the file states `none` instead of a copy of the target's tokenizer (measured here: identical counters either way).

RoPE is the head's own schedule, written as llama.cpp's converter writes it (gguf_rope.py: llama3 as a
`rope_freqs.weight` tensor, linear and YaRN as keys), and refused by name where llama.cpp would run another."""

from __future__ import annotations

import shlex

from ..errors import ShapeMismatchError
from ..kinds import EAGLE3, LAYER
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS
from .base import DerivedTensor, Layout, OutputContext, Rewrite, output_limit, written_aux_ids
from .gguf_rope import (
    ROPE_FREQS,
    GgufMetadata,
    head_rope,
    llama3_rewrite,
    rope_refusal,
    rope_scaling_keys,
    written_scaling,
)
from .plain_eagle3 import plain_eagle3_reasons
from .vllm import eagle3_output_roles

ARCH = "eagle3"
GGUF_FILE = "eagle3.gguf"
# canonical name -> llama.cpp's tensor name (gguf-py MODEL_TENSOR names for MODEL_ARCH.EAGLE3)
TENSOR_NAMES = {
    "fc.weight": "fc.weight", "lm_head.weight": "output.weight", "norm.weight": "output_norm.weight",
    "embed_tokens.weight": "token_embd.weight", "input_norm.weight": "enc.output_norm.weight", "d2t": "d2t",
    LAYER + "hidden_norm.weight": "blk.0.attn_norm_2.weight",
    LAYER + "input_layernorm.weight": "blk.0.attn_norm.weight",
    LAYER + "post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    LAYER + "self_attn.q_proj.weight": "blk.0.attn_q.weight", LAYER + "self_attn.k_proj.weight": "blk.0.attn_k.weight",
    LAYER + "self_attn.v_proj.weight": "blk.0.attn_v.weight",
    LAYER + "self_attn.o_proj.weight": "blk.0.attn_output.weight",
    LAYER + "mlp.gate_proj.weight": "blk.0.ffn_gate.weight", LAYER + "mlp.up_proj.weight": "blk.0.ffn_up.weight",
    LAYER + "mlp.down_proj.weight": "blk.0.ffn_down.weight",
}
# general.file_type (llama_ftype) of a file whose matrices are all in one dtype
FILE_TYPES = {"float32": 0, "float16": 1, "bfloat16": 32}


class Gguf(Layout):  # registered by gguf_dflash.py, which adds DFlash heads to `--to gguf`
    name = "gguf"
    summary = "llama.cpp GGUF (`general.architecture = eagle3`, absolute I64 `d2t`, llama.cpp's q/k order)"
    engine = "llama.cpp (b11434, `--spec-type draft-eagle3`)"
    served_by = ("llamacpp",)
    output_order = 40
    kinds = (EAGLE3,)
    readable = False
    gguf_file = GGUF_FILE

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        return super().refusal(spec, canonical) or _inexpressible(spec)

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        """The GGUF metadata, key -> [GGUF type name, value], as llama.cpp's converter writes it for this head."""
        rope_dim = spec.head_dim
        meta = {
            "general.architecture": ["STRING", ARCH],
            "eagle3.target_layers": ["ARRAY[INT32]", CONVENTIONS["gguf"].to_stored(written_aux_ids(spec))],
            "eagle3.target_hidden_size": ["UINT32", spec.target_hidden_size or spec.hidden_size],
            # explicit: llama.cpp defaults it to false, vLLM's speculators path to true
            "eagle3.norm_before_residual": ["BOOL", bool(spec.norm_before_residual)],
            "eagle3.norm_before_fc": ["BOOL", bool(spec.norm_before_fc)],
            "general.type": ["STRING", "model"],
            "general.name": ["STRING", "Eagle3"],
            "eagle3.block_count": ["UINT32", spec.num_layers],
            "eagle3.context_length": ["UINT32", output_limit(spec, ctx)],
            "eagle3.embedding_length": ["UINT32", spec.hidden_size],
            "eagle3.feed_forward_length": ["UINT32", spec.intermediate_size],
            "eagle3.attention.head_count": ["UINT32", spec.num_attention_heads],
            "eagle3.attention.head_count_kv": ["UINT32", spec.num_key_value_heads],
            **rope_scaling_keys(spec, ARCH),
            "eagle3.rope.freq_base": ["FLOAT32", head_rope(spec).theta],
            "eagle3.attention.layer_norm_rms_epsilon": ["FLOAT32", spec.rms_norm_eps],
            "eagle3.attention.key_length": ["UINT32", spec.head_dim],
            "eagle3.attention.value_length": ["UINT32", spec.head_dim],
            "general.file_type": ["UINT32", FILE_TYPES[ctx.dtype_name]],
            "eagle3.vocab_size": ["UINT32", spec.vocab_size],
            "eagle3.rope.dimension_count": ["UINT32", rope_dim],
            "general.quantization_version": ["UINT32", 2],
            "tokenizer.ggml.model": ["STRING", "none"],  # required by the loader, never read for a draft (above)
        }
        return GgufMetadata(meta, written_scaling(spec))

    def flat_config(self, config: dict) -> dict:
        """The HF keys the output checks read (positions/checks.py), from the metadata and the schedule it stands for
        (a llama3 schedule is a tensor, with no key of its own)."""
        value = {key: v[1] for key, v in config.items()}
        return {"max_position_embeddings": value.get("eagle3.context_length"),
                "rope_theta": value.get("eagle3.rope.freq_base"), "num_hidden_layers": value.get("eagle3.block_count"),
                "rope_scaling": getattr(config, "rope_scaling", None)}

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        roles = eagle3_output_roles(spec, canonical)
        return {TENSOR_NAMES[n]: n for n in sorted(roles) if n in TENSOR_NAMES}

    def derived_tensors(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, DerivedTensor]:
        if head_rope(spec).type != "llama3":
            return {}
        return {ROPE_FREQS: DerivedTensor("rope_freqs", (spec.head_dim // 2,))}  # its values: `rewrites`

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        return {"t2d": "llama.cpp reads no t2d (its converter skips it; d2t holds the map)"}

    def rewrites(self, spec: DraftSpec) -> dict[str, Rewrite]:
        q_heads, kv_heads = spec.num_attention_heads, spec.num_key_value_heads
        return {"blk.0.attn_q.weight": Rewrite(f"llama.cpp's RoPE row order ({q_heads} heads)",
                                               _row_order("q_proj", q_heads, spec.head_dim)),
                "blk.0.attn_k.weight": Rewrite(f"llama.cpp's RoPE row order ({kv_heads} heads)",
                                               _row_order("k_proj", kv_heads, spec.head_dim)),
                "d2t": Rewrite("offsets -> absolute target ids (d2t[i] + i), I64", absolute_d2t),
                **({ROPE_FREQS: llama3_rewrite(spec)} if head_rope(spec).type == "llama3" else {})}

    def output_dtype(self, name: str, shape: tuple[int, ...], planned):
        """1-D norms stay F32, as llama.cpp's converter writes them whatever --outtype is."""
        import torch  # not at import: layouts are read before torch loads

        return torch.float32 if len(shape) == 1 and planned.is_floating_point else planned

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        target = "TARGET.gguf"  # the target converted by llama.cpp's own convert_hf_to_gguf.py
        draft = shlex.quote(f"{ctx.out_label}/{GGUF_FILE}")
        return (f"python convert_hf_to_gguf.py {shlex.quote(ctx.target_label)} --outfile {target}  # llama.cpp's "
                f"converter, for the target\nllama-server -m {target} -md {draft} --spec-type draft-eagle3 "
                f"--spec-draft-n-max {ctx.num_speculative_tokens}\n# or: llama-speculative-simple -m {target} "
                f"-md {draft} --spec-type draft-eagle3 --spec-draft-n-max {ctx.num_speculative_tokens} -p PROMPT")


def llama_permute(weight, heads: int):
    """HF q/k rows (per head: the first half of the rotary dims, then the second) into llama.cpp's order (pairs of
    adjacent rows), as convert_hf_to_gguf.py's LlamaModel.permute does for a Llama model."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _row_order(name: str, heads: int, head_dim: int):
    """llama_permute for a q/k weight that must be [heads * head_dim, columns]: any other shape (a damaged or
    mislabelled tensor) is refused by name instead of failing inside the permutation."""
    def permute(weight):
        if weight.dim() != 2 or weight.shape[0] != heads * head_dim:
            raise ShapeMismatchError(
                f"The head's {name}.weight is {list(weight.shape)}; its config ({heads} heads of {head_dim}) and "
                f"llama.cpp's EAGLE-3 loader need [{heads * head_dim}, columns].",
                "The head's tensors and config.json disagree: re-export the head, or fix its config.")
        return llama_permute(weight, heads)
    return permute


def absolute_d2t(d2t):
    """HF d2t stores offsets (target id = d2t[i] + i); llama.cpp's loader reads target ids."""
    import torch

    return d2t.to(torch.int64) + torch.arange(d2t.numel(), dtype=torch.int64)


def _inexpressible(spec: DraftSpec) -> str | None:
    """Why llama.cpp b11434 cannot run this EAGLE-3 head (src/models/eagle3.cpp, common/speculative.cpp), or None."""
    reasons = [
        (spec.fc_norm, "llama.cpp has no per-aux-state norms: `fc_norm.{i}` (EAGLE 3.1) makes its own converter "
                       "abort, and its graph has no place for them"),
        (spec.norm_output, "llama.cpp has no norm_output (EAGLE 3.1): nothing in b11434 reads it, so it would feed "
                           "back the pre-norm state in silence"),
        *plain_eagle3_reasons(spec, "llama.cpp", "eagle3.target_layers"),
        (spec.head_dim <= 0 or spec.head_dim % 2,
         f"llama.cpp rotates pairs of a head's dimensions; this head's head_dim is {spec.head_dim}"),
    ]
    return next((why for refused, why in reasons if refused), None) or rope_refusal(head_rope(spec))
