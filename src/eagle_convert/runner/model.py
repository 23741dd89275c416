"""A compact Llama-family target model (llama, mistral, qwen2, qwen3, and the MoE qwen3_moe and mixtral) for the bench
runner, in the style of gpt-fast.

Weights are plain tensors read by HF name through `get_tensor`; each attention layer owns a static KV cache written by
position (see layers.py), so rolling back rejected drafts is just the caller choosing the next position.

`TargetModel.forward` returns what EAGLE needs besides the logits: the final post-norm hidden state (EAGLE-1's
feature, HF `hidden_states[-1]`) and the concatenated inputs of the aux layers (EAGLE-3's feature, HF
`hidden_states[i]` for i in aux_layer_ids); and the pre-norm residual stream an MTP layer reads.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import UnsupportedModelError
from ..rope.types import DEFAULT_ROPE_THETA, LIMIT, ORIGINAL, ROPE_TYPES
from .architectures import (
    ALWAYS,
    ARCHITECTURES,
    FROM_CONFIG,
    SUPPORTED_ARCHITECTURES,
    supported_targets_line,
)
from .layers import (
    Attention,
    GetTensor,
    Mlp,
    TreeAttention,
    as_positions,
    cast_reader,
    load_attention,
    load_mlp,
    rms_norm,
)
from .masks import ForwardMasks
from .moe_mlp import MoeMlp, is_moe_layer, load_moe
from .precision import pin_exact_fp32
from .rotary_table import RotaryTable

SUPPORTED_ROPE_TYPES = tuple(ROPE_TYPES)
# Rows per prefill forward (runner/prefill.py): small enough that an 8k-32k prompt fits on a CPU (one chunk's
# attention over every position before it is chunk x prompt scores per head), large enough for efficient matmuls.
DEFAULT_PREFILL_CHUNK = 1024


def _unsupported(what: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"The bench runner does not implement {what}.",
        f"Supported targets: {supported_targets_line()}; RoPE types: "
        f"{', '.join(SUPPORTED_ROPE_TYPES)}. Bench this target with an engine instead: `eagle-convert bench "
        "--engine vllm`.",
    )


@dataclass(frozen=True)
class TargetConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None  # the rope_type's own parameters; None for plain RoPE
    tie_word_embeddings: bool
    qkv_bias: bool  # qwen2 always; llama/qwen3 via attention_bias
    o_bias: bool  # llama/qwen3 attention_bias also biases o_proj (qwen2's fixed biases do not)
    mlp_bias: bool
    qk_norm: bool  # qwen3: RMS norm per head on q and k, before RoPE
    sliding_windows: tuple[int | None, ...]  # per layer; None = full attention
    moe_layers: tuple[bool, ...] = ()  # per layer: experts (runner/moe_mlp.py) instead of a dense MLP

    @classmethod
    def from_hf(cls, config: dict) -> TargetConfig:
        model_type = config.get("model_type")
        if model_type not in SUPPORTED_ARCHITECTURES:
            raise _unsupported(f"model_type {model_type!r}")
        for arch in config.get("architectures") or ():
            if arch not in SUPPORTED_ARCHITECTURES[model_type]:
                raise _unsupported(f"architecture {arch!r}")
        if config.get("hidden_act", "silu") != "silu":
            raise _unsupported(f"hidden_act {config['hidden_act']!r}")
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        layers = config["num_hidden_layers"]
        theta, scaling = rope_from_hf(config)
        row = ARCHITECTURES[model_type]
        attention_bias = bool(config.get("attention_bias", False))
        return cls(
            model_type=model_type,
            vocab_size=config["vocab_size"],
            hidden_size=hidden,
            intermediate_size=config["intermediate_size"],
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or hidden // heads,
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=scaling,
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=row.qkv_bias == ALWAYS or (row.qkv_bias == FROM_CONFIG and attention_bias),
            o_bias=row.o_bias and attention_bias,
            mlp_bias=row.mlp_bias and bool(config.get("mlp_bias", False)),
            qk_norm=row.qk_norm,
            sliding_windows=_sliding_windows(row.sliding, config, layers),
            moe_layers=tuple(row.moe and is_moe_layer(model_type, config, i) for i in range(layers)),
        )


def rope_from_hf(config: dict) -> tuple[float, dict | None]:
    """(theta, scaling) from `rope_theta`/`rope_scaling` or transformers 5's `rope_parameters`, completed as
    transformers' `standardize_rope_params` completes it. As in transformers, `rope_scaling` wins over
    `rope_parameters`, and a theta inside the dict wins over the top level. The scaling dict carries what its type
    needs from the config (original and current position limits), so runner/rotary_table.py reads nothing else. What
    each type defaults and needs is its row in rope/types.py."""
    params = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})
    theta = float(params.pop("rope_theta", None) or config.get("rope_theta") or DEFAULT_ROPE_THETA)
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise _unsupported(f"rope_type {rope_type!r}")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise _unsupported("partial_rotary_factor != 1")
    if rope_type == "default":
        return theta, None
    row, max_len = ROPE_TYPES[rope_type], config.get("max_position_embeddings")
    if row.params.get(ORIGINAL) == LIMIT:  # a top-level original limit wins (Phi-3's layout)
        params[ORIGINAL] = config.get(ORIGINAL) or params.get(ORIGINAL) or max_len
    if row.factor_from_limits and params.get("factor") is None and max_len:
        params["factor"] = max_len / params[ORIGINAL]
    params["max_position_embeddings"] = max_len
    missing = [key for key in row.needs if params.get(key) is None]
    if missing:
        raise _unsupported(f"rope_type {rope_type!r} without {', '.join(missing)} (a config transformers refuses)")
    return theta, {"rope_type": rope_type, **params}


def _sliding_windows(sliding: str | None, config: dict, layers: int) -> tuple[int | None, ...]:
    window = config.get("sliding_window")
    if sliding == "every_layer":  # HF applies the window on every layer and ignores layer_types
        return (window,) * layers
    if sliding == "uniform":  # one window for every layer, when use_sliding_window
        return (window if config.get("use_sliding_window") else None,) * layers
    if sliding == "layer_types" and config.get("use_sliding_window") and window:
        types = config.get("layer_types") or [
            "sliding_attention" if i >= config.get("max_window_layers", 28) else "full_attention" for i in range(layers)
        ]
        return tuple(window if t == "sliding_attention" else None for t in types)
    return (None,) * layers


def draft_sliding_windows(config: dict, layers: int) -> tuple[int | None, ...]:
    """A draft head's window per layer, from its own config: explicit `layer_types` name its sliding layers (as vLLM
    reads a Llama draft's, speculators' sliding-window drafts, and transformers' Qwen2); without them, its family's
    rule (mistral: every layer; qwen2/qwen3: use_sliding_window). A `use_sliding_window: false` beside a nominal
    window (Qwen2 configs carry one) means none."""
    window = config.get("sliding_window")
    if not window or config.get("use_sliding_window") is False:
        return (None,) * layers
    types = config.get("layer_types")
    if types:
        return tuple(window if i < len(types) and types[i] == "sliding_attention" else None for i in range(layers))
    row = ARCHITECTURES.get(config.get("model_type"))
    return _sliding_windows(row.sliding if row else None, config, layers)


def _checked_aux_ids(aux_layer_ids: Sequence[int], num_layers: int) -> tuple[int, ...]:
    """Id num_layers is the last layer's output before the final norm (a DFlash head may tap it; vLLM captures it
    as aux id num_layers)."""
    ids = tuple(aux_layer_ids)
    if any(not 0 <= i <= num_layers for i in ids) or len(set(ids)) < len(ids):
        raise ValueError(f"aux layer ids {ids} must be distinct and lie in [0, {num_layers}]")
    return ids


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [1, T, V] (or [1, 1, V] with last_logits_only)
    hidden: torch.Tensor  # [1, T, H] after the final norm: EAGLE-1's feature
    aux: torch.Tensor | None  # [1, T, len(aux_layer_ids) * H]: inputs of the aux layers, low to high; EAGLE-3's feature
    # [1, T, H] the residual stream before the final norm: what vLLM hands an MTP layer (runner/mtp_head.py)
    pre_norm: torch.Tensor | None = None


@dataclass
class _Layer:
    input_norm: torch.Tensor
    attention: Attention
    post_norm: torch.Tensor
    mlp: Mlp | MoeMlp


class TargetModel:
    """A Llama-family causal LM with a static per-position KV cache. Batch 1."""

    def __init__(self, config: dict, get_tensor: GetTensor, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", aux_layer_ids: Sequence[int] = (),
                 prefill_chunk: int = DEFAULT_PREFILL_CHUNK):
        self.config = cfg = TargetConfig.from_hf(config)
        self.prefill_chunk = prefill_chunk
        self.dtype, self.device = dtype, torch.device(device)
        pin_exact_fp32(self.device, dtype)  # fp32 on a GPU means fp32: TF32 off (runner/precision.py)
        self.aux_layer_ids = _checked_aux_ids(aux_layer_ids, cfg.num_hidden_layers)
        get = cast_reader(get_tensor, dtype, self.device)
        self.embed_weight = get("model.embed_tokens.weight")
        self.lm_head_weight = self.embed_weight if cfg.tie_word_embeddings else get("lm_head.weight")
        self.norm = get("model.norm.weight")
        self.rope = RotaryTable(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, dtype, self.device)
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            prefix = f"model.layers.{i}."
            attention = load_attention(
                get, prefix, num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads,
                head_dim=cfg.head_dim, dtype=dtype, device=self.device, qkv_bias=cfg.qkv_bias, o_bias=cfg.o_bias,
                qk_norm=cfg.qk_norm, eps=cfg.rms_norm_eps, sliding_window=cfg.sliding_windows[i])
            mlp = (load_moe(get, prefix, cfg.model_type, config) if cfg.moe_layers[i]
                   else load_mlp(get, prefix, cfg.mlp_bias))
            self.layers.append(_Layer(get(prefix + "input_layernorm.weight"), attention,
                                      get(prefix + "post_attention_layernorm.weight"), mlp))

    def reserve(self, positions: int) -> None:
        """Every layer's cache allocated for `positions` now (see KVCache.reserve)."""
        for layer in self.layers:
            layer.attention.cache.reserve(positions)

    def with_aux_layer_ids(self, aux_layer_ids: Sequence[int]) -> TargetModel:
        """The same model (weights and caches shared) returning the inputs of other aux layers: two heads that read
        different layers are benched on one loaded target, one after the other."""
        other = copy.copy(self)
        other.aux_layer_ids = _checked_aux_ids(aux_layer_ids, self.config.num_hidden_layers)
        return other

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | Sequence[int], *,
                last_logits_only: bool = False, tree_attention: TreeAttention | None = None) -> TargetOutput:
        """input_ids [1, T] at ascending contiguous `positions`; every position before them must already be cached.
        `tree_attention`: a tree's rows instead (positions repeat; slots and mask as given;
        see runner/tree_verify.py)."""
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"batch 1 only: input_ids must be [1, T], got {tuple(input_ids.shape)}")
        positions, end = as_positions(positions, self.device)
        eps = self.config.rms_norm_eps
        h = F.embedding(input_ids.to(self.device), self.embed_weight)
        aux, masks = [], ForwardMasks.build(positions, end, tree_attention)  # one set of masks for every layer
        for i, layer in enumerate(self.layers):
            if i in self.aux_layer_ids:
                aux.append(h)
            h = h + layer.attention(rms_norm(h, layer.input_norm, eps), positions, end, self.rope, masks)
            h = h + layer.mlp(rms_norm(h, layer.post_norm, eps))
        if len(self.layers) in self.aux_layer_ids:
            aux.append(h)
        hidden = rms_norm(h, self.norm, eps)
        logits = F.linear(hidden[:, -1:] if last_logits_only else hidden, self.lm_head_weight)
        return TargetOutput(logits=logits, hidden=hidden, aux=torch.cat(aux, dim=-1) if aux else None, pre_norm=h)

    __call__ = forward
