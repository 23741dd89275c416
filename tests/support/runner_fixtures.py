"""Tiny models for the runner tests: golden-set loaders, random Llama-family weights, and heads built to agree with
their target."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from eagle_convert.kinds import EAGLE1, EAGLE3
from eagle_convert.rope.types import DEFAULT_ROPE_THETA
from eagle_convert.runner.heads import build_draft_head
from eagle_convert.runner.model import TargetConfig, TargetModel
from eagle_convert.spec import DraftSpec

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine a busy neighbour makes every
# parallel region wait: one thread keeps these tests fast and their run time stable.
torch.set_num_threads(1)


def strict_getter(tensors: dict[str, torch.Tensor]):
    def get(name: str) -> torch.Tensor:
        return tensors[name]  # KeyError for a missing name, as the heads expect
    return get


def read_target_dir(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """config and all tensors of an HF folder: one model.safetensors or shards listed by the index."""
    config = json.loads((path / "config.json").read_text())
    index = path / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists()
             else ["model.safetensors"])
    tensors = {}
    for file in files:
        with safe_open(path / file, framework="pt") as f:
            tensors.update({name: f.get_tensor(name) for name in f.keys()})
    return config, tensors


def read_golden_draft(path: Path) -> tuple[DraftSpec, dict[str, torch.Tensor]]:
    """The raw release files, renamed to canonical names (midlayer. -> layers.0.), and a DraftSpec from the config.
    Stand-in for the project's format layer."""
    config = json.loads((path / "config.json").read_text())
    if (path / "model.safetensors").exists():
        raw = load_file(path / "model.safetensors")
    else:
        raw = torch.load(path / "pytorch_model.bin", weights_only=True)
    tensors = {name.replace("midlayer.", "layers.0.", 1) if name.startswith("midlayer.") else name: t
               for name, t in raw.items()}
    eagle3 = "d2t" in tensors
    heads = config["num_attention_heads"]
    spec = DraftSpec(
        kind=EAGLE3 if eagle3 else EAGLE1,
        hidden_size=config["hidden_size"],
        num_attention_heads=heads,
        num_key_value_heads=config.get("num_key_value_heads", heads),
        head_dim=config["hidden_size"] // heads,
        intermediate_size=config["intermediate_size"],
        rms_norm_eps=config["rms_norm_eps"],
        rope_theta=config.get("rope_theta", DEFAULT_ROPE_THETA),
        vocab_size=config["vocab_size"],
        max_position_embeddings=config["max_position_embeddings"],
        fc_bias=not eagle3 and config.get("bias", True),
        qkv_bias=bool(config.get("qkv_bias", False)),
        draft_vocab_size=config.get("draft_vocab_size"),
        target_hidden_size=config.get("target_hidden_size", config["hidden_size"]) if eagle3 else None,
        base_model_type=config.get("model_type", "llama"),
    )
    return spec, tensors


# ---------------------------------------------------------------------------------------------------------------
# Random tiny Llama-family models

def tiny_config(model_type: str = "llama", **overrides) -> dict:
    config = {
        "model_type": model_type,
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM"}[model_type]],
        "vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 256, "tie_word_embeddings": False, "hidden_act": "silu",
    }
    if model_type == "qwen3":
        config["head_dim"] = 16  # differs from hidden / heads, as in real Qwen3 configs
    config.update(overrides)
    return config


def random_target_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """HF-named weights with spread-out logits (std ~1 embeddings, 1/sqrt(fan_in) projections), so argmaxes are
    far from ties and greedy comparisons are robust to summation order."""
    g = torch.Generator().manual_seed(seed)
    cfg = TargetConfig.from_hf(config)  # which optional tensors (biases, q/k norms) this family has
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads

    def w(*shape, scale=None):
        return torch.randn(*shape, generator=g) * (scale if scale is not None else shape[-1] ** -0.5)

    def norm(n):
        return 1 + 0.1 * torch.randn(n, generator=g)

    out = {"model.embed_tokens.weight": w(vocab, hidden, scale=1.0), "model.norm.weight": norm(hidden)}
    if not config.get("tie_word_embeddings"):
        out["lm_head.weight"] = w(vocab, hidden, scale=3 * hidden ** -0.5)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": norm(hidden), p + "post_attention_layernorm.weight": norm(hidden),
                p + "self_attn.q_proj.weight": w(heads * head_dim, hidden),
                p + "self_attn.k_proj.weight": w(kv * head_dim, hidden),
                p + "self_attn.v_proj.weight": w(kv * head_dim, hidden),
                p + "self_attn.o_proj.weight": w(hidden, heads * head_dim),
                p + "mlp.gate_proj.weight": w(inter, hidden), p + "mlp.up_proj.weight": w(inter, hidden),
                p + "mlp.down_proj.weight": w(hidden, inter)}
        biases = {}
        if cfg.qkv_bias:
            biases |= {"self_attn.q_proj": heads * head_dim, "self_attn.k_proj": kv * head_dim,
                       "self_attn.v_proj": kv * head_dim}
        if cfg.o_bias:
            biases["self_attn.o_proj"] = hidden
        if cfg.mlp_bias:
            biases |= {"mlp.gate_proj": inter, "mlp.up_proj": inter, "mlp.down_proj": hidden}
        out |= {f"{p}{name}.bias": 0.1 * torch.randn(size, generator=g) for name, size in biases.items()}
        if cfg.qk_norm:
            out |= {p + "self_attn.q_norm.weight": norm(head_dim), p + "self_attn.k_norm.weight": norm(head_dim)}
    return out


def draft_spec_for(config: dict, kind: str = EAGLE1, **overrides) -> DraftSpec:
    heads = config["num_attention_heads"]
    fields = dict(kind=kind, hidden_size=config["hidden_size"], num_attention_heads=heads,
                  num_key_value_heads=config["num_key_value_heads"], head_dim=config["hidden_size"] // heads,
                  intermediate_size=config["intermediate_size"], rms_norm_eps=config["rms_norm_eps"],
                  rope_theta=10000.0, vocab_size=config["vocab_size"], max_position_embeddings=2048)
    if kind == EAGLE3:
        fields |= dict(draft_vocab_size=config["vocab_size"], target_hidden_size=config["hidden_size"])
    return DraftSpec(**(fields | overrides))


def random_head_weights(spec: DraftSpec, seed: int) -> dict[str, torch.Tensor]:
    """Canonical-name weights of a random head of spec.kind (draft vocab = spec.draft_vocab_size, identity d2t)."""
    g = torch.Generator().manual_seed(seed)
    h, inter = spec.hidden_size, spec.intermediate_size
    q_dim, kv_dim = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
    attn_in = 2 * h if spec.is_eagle3 else h

    def w(*shape):
        return torch.randn(*shape, generator=g) * shape[-1] ** -0.5

    out = {"layers.0.self_attn.q_proj.weight": w(q_dim, attn_in),
           "layers.0.self_attn.k_proj.weight": w(kv_dim, attn_in),
           "layers.0.self_attn.v_proj.weight": w(kv_dim, attn_in), "layers.0.self_attn.o_proj.weight": w(h, q_dim),
           "layers.0.mlp.gate_proj.weight": w(inter, h), "layers.0.mlp.up_proj.weight": w(inter, h),
           "layers.0.mlp.down_proj.weight": w(h, inter), "layers.0.post_attention_layernorm.weight": torch.ones(h)}
    if spec.is_eagle3:
        vd = spec.draft_vocab_size
        out |= {"fc.weight": w(h, 3 * spec.target_hidden_size), "layers.0.input_layernorm.weight": torch.ones(h),
                "layers.0.hidden_norm.weight": torch.ones(h), "norm.weight": torch.ones(h),
                "lm_head.weight": w(vd, h) * 3, "d2t": torch.zeros(vd, dtype=torch.int64)}
    else:
        out["fc.weight"] = w(h, 2 * h)
        if spec.fc_bias:
            out["fc.bias"] = 0.1 * torch.randn(h, generator=g)
    return out


def build_pair(config: dict, target_weights: dict, spec: DraftSpec, head_weights: dict, *, aux_layer_ids=(),
               lm_head: torch.Tensor | None = None, dtype=torch.float32, device="cpu"):
    target = TargetModel(config, strict_getter(target_weights), dtype=dtype, aux_layer_ids=aux_layer_ids,
                         device=device)
    head = build_draft_head(spec, strict_getter(head_weights), target_embedding=target.embed_weight,
                            target_lm_head=target.lm_head_weight if lm_head is None else lm_head, dtype=dtype,
                            device=device)
    return target, head


def memoryless_target(seed: int, vocab: int = 64, hidden: int = 32, layers: int = 1):
    """A target whose next token depends on the current token only: every o_proj is zero, so attention adds nothing,
    and layers after the first have a zero down_proj, so they are the identity. Final norm weights are all ones."""
    config = tiny_config(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers)
    weights = random_target_weights(config, seed)
    weights["model.norm.weight"] = torch.ones(hidden)
    for i in range(layers):
        weights[f"model.layers.{i}.self_attn.o_proj.weight"].zero_()
        if i:
            weights[f"model.layers.{i}.mlp.down_proj.weight"].zero_()
    return config, weights


def agreeing_eagle1_head(config: dict, target_weights: dict, seed: int) -> tuple[DraftSpec, dict]:
    """fc passes the embedding through, o_proj = 0, and the MLP and post norm are the target layer 0's: the head's
    feature is the target's pre-norm state, and since the target's final norm (all ones) only rescales by a positive
    number, target_lm_head(f^) has the target's argmax."""
    spec = draft_spec_for(config)
    weights = random_head_weights(spec, seed)
    h = config["hidden_size"]
    weights["fc.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1)
    weights["layers.0.self_attn.o_proj.weight"].zero_()
    for name in ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                 "post_attention_layernorm.weight"):
        weights[f"layers.0.{name}"] = target_weights[f"model.layers.0.{name}"].clone()
    return spec, weights

