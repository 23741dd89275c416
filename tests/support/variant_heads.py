"""One tiny EAGLE-3 head per variant and per exporter layout, saved the way that variant's exporter saves it.

Each head is random (seeded) but complete: every tensor its variant defines, and the flags where its exporter puts
them. `VARIANTS` maps a name to the keyword arguments of `make_variant_head`."""

from __future__ import annotations

from pathlib import Path

import torch

from eagle_convert.testing.tiny import TinyConfig, save_checkpoint

TARGET = TinyConfig(num_hidden_layers=4)  # every variant's target: aux ids fit in 4 layers
WIDE_TARGET = TinyConfig(num_hidden_layers=4, hidden_size=96, num_attention_heads=4, num_key_value_heads=2)

VARIANTS = {
    "base": {},
    "norm_before_fc": {"norm_before_fc": True},
    "norm_before_fc_nested": {"norm_before_fc": True, "nested": True},  # NVIDIA gpt-oss heads: flag in eagle_config
    # EAGLE 3.1 as the engines define it (norm_output: the normed state is fed back), in a config written for an
    # engine (it states num_aux_hidden_states, as eagle-convert's --to sglang does): formats/eagle3.py ENGINE_ONLY_KEYS
    "eagle31": {"fc_norm": True, "norm_output": True, "engine_keys": True},
    # SpecForge's EAGLE 3.1 config (configs/qwen3-30B-A3B-eagle3.1.json: fc_norm + norm_output, nothing else): its
    # norm_output only sends the logits through `norm`, the pre-norm state is fed back = the engines' norm_output false
    "specforge31": {"fc_norm": True, "norm_output": True},
    "aux4": {"aux_ids": [0, 1, 2, 3]},
    "aux4_norm_before_fc": {"aux_ids": [0, 1, 2, 3], "norm_before_fc": True, "nested": True},
    "no_aux": {"aux_ids": None},
    "norm_before_residual": {"norm_before_residual": True},
    "two_layers": {"layers": 2},
    "qwen3": {"qwen3": True},
    "vocab_null": {"draft_vocab": None},
    "wide_target": {"wide": True},
    "fc_bias": {"fc_bias": True},  # SGLang's `bias` EAGLE-3 heads: refused by every layout (engine-notes.md)
}


def _rand(g, *shape, scale=0.2):
    return torch.randn(*shape, generator=g) * scale


def _norm(g, n):
    return 1.0 + _rand(g, n, scale=0.1)


def variant_tensors(cfg: TinyConfig, *, draft_hidden: int, aux_ids, norm_before_fc=False, fc_norm=False, layers=1,
                    qwen3=False, draft_vocab: int | None = 64, own_embed=False, fc_bias=False,
                    seed=2) -> dict[str, torch.Tensor]:
    """Canonical names (`layers.N.*`); the exporters rename them."""
    g = torch.Generator().manual_seed(seed)
    h, t, v, i = draft_hidden, cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = h // heads
    out: dict[str, torch.Tensor] = {"norm.weight": _norm(g, h)}
    n = len(aux_ids) if aux_ids else 0
    if n:
        out["fc.weight"] = _rand(g, h, n * t, scale=0.1)
    if norm_before_fc:
        out["input_norm.weight"] = _norm(g, n * t)
    if fc_norm:
        out.update({f"fc_norm.{k}.weight": _norm(g, t) for k in range(n)})
    for layer in range(layers):
        p, width = f"layers.{layer}.", 2 * h if layer == 0 else h
        out.update({
            p + "self_attn.q_proj.weight": _rand(g, heads * hd, width),
            p + "self_attn.k_proj.weight": _rand(g, kv_heads * hd, width),
            p + "self_attn.v_proj.weight": _rand(g, kv_heads * hd, width),
            p + "self_attn.o_proj.weight": _rand(g, h, heads * hd),
            p + "mlp.gate_proj.weight": _rand(g, i, h), p + "mlp.up_proj.weight": _rand(g, i, h),
            p + "mlp.down_proj.weight": _rand(g, h, i), p + "input_layernorm.weight": _norm(g, h),
            p + "post_attention_layernorm.weight": _norm(g, h),
        })
        if layer == 0:
            out[p + "hidden_norm.weight"] = _norm(g, h)
        if qwen3:
            out[p + "self_attn.q_norm.weight"] = _norm(g, hd)
            out[p + "self_attn.k_norm.weight"] = _norm(g, hd)
    if draft_vocab is not None:
        used = torch.sort(torch.randperm(v, generator=g)[:draft_vocab]).values
        t2d = torch.zeros(v, dtype=torch.bool)
        t2d[used] = True
        out.update({"lm_head.weight": _rand(g, draft_vocab, h, scale=0.5),
                    "d2t": (used - torch.arange(draft_vocab)).to(torch.int64), "t2d": t2d})
    if own_embed:
        out["embed_tokens.weight"] = _rand(g, v, h, scale=1.0)
    if fc_bias:
        out["fc.bias"] = _rand(g, h, scale=0.1)
    return out


def variant_config(cfg: TinyConfig, *, draft_hidden: int, aux_ids, norm_before_fc=False, fc_norm=False,
                   norm_output=False, norm_before_residual=False, layers=1, qwen3=False, draft_vocab=64,
                   nested=False, wide=False, engine_keys=False) -> dict:
    c = cfg.hf_config()
    c.pop("attention_bias", None)
    c.update(architectures=["Qwen3ForCausalLM" if qwen3 else "LlamaForCausalLMEagle3"],
             model_type="qwen3" if qwen3 else "llama", num_hidden_layers=layers, max_position_embeddings=2048,
             hidden_size=draft_hidden, head_dim=draft_hidden // cfg.num_attention_heads)
    if draft_vocab is not None:
        c["draft_vocab_size"] = draft_vocab
    if wide:
        c["target_hidden_size"] = cfg.hidden_size
    flags = {"norm_before_fc": norm_before_fc, "fc_norm": fc_norm, "norm_output": norm_output,
             "norm_before_residual": norm_before_residual}
    flags = {k: v for k, v in flags.items() if v}
    if engine_keys:
        c["num_aux_hidden_states"] = len(aux_ids or ())
    where = c.setdefault("eagle_config", {}) if nested else c
    where.update(flags)
    if aux_ids:  # nested ids are in SGLang's convention (outputs of layers: ours - 1), as these exporters write them
        where["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in aux_ids] if nested else list(aux_ids)
    else:
        c.setdefault("eagle_config", {})["use_aux_hidden_state"] = False
    return c


def make_variant_head(folder: Path, *, aux_ids=(0, 1, 3), norm_before_fc=False, fc_norm=False, norm_output=False,
                      norm_before_residual=False, layers=1, qwen3=False, draft_vocab=64, nested=False, wide=False,
                      fc_bias=False, engine_keys=False, exporter: str = "specforge", modelopt_keys=None,
                      seed=2) -> dict[str, torch.Tensor]:
    """Save one variant; `exporter`: "specforge" (`midlayer.` for layer 0, flat config), "modelopt" (`eagle_module.`
    prefix, target keys copied to the top level), "modelopt-export" (ModelOpt's deployment export: `layers.0.*`, the
    flags and ModelOpt's own keys in eagle_config, `modelopt_keys` overriding them), "legacy_fc_norm"
    (aux_norm_low/mid/high). Returns canonical tensors."""
    cfg = WIDE_TARGET if wide else TARGET
    draft_hidden = 64 if wide else cfg.hidden_size
    tensors = variant_tensors(cfg, draft_hidden=draft_hidden, aux_ids=aux_ids, norm_before_fc=norm_before_fc,
                              fc_norm=fc_norm, layers=layers, qwen3=qwen3, draft_vocab=draft_vocab, own_embed=wide,
                              fc_bias=fc_bias, seed=seed)
    config = variant_config(cfg, draft_hidden=draft_hidden, aux_ids=aux_ids, norm_before_fc=norm_before_fc,
                            fc_norm=fc_norm, norm_output=norm_output, norm_before_residual=norm_before_residual,
                            layers=layers, qwen3=qwen3, draft_vocab=draft_vocab, nested=nested, wide=wide,
                            engine_keys=engine_keys)
    if fc_bias:
        config["bias"] = True  # SGLang's flag for it
    saved = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v for k, v in tensors.items()}
    if exporter == "modelopt":
        saved = {"eagle_module." + k: v for k, v in saved.items()}
        config.update(num_hidden_layers=cfg.num_hidden_layers, tie_word_embeddings=True)  # copied from the target
        nested_cfg = config.setdefault("eagle_config", {})
        for key in ("norm_before_fc", "fc_norm", "norm_output"):
            if key in config:
                nested_cfg[key] = config.pop(key)
        if "eagle_aux_hidden_state_layer_ids" in config:
            layer_ids = config.pop("eagle_aux_hidden_state_layer_ids")
            nested_cfg["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in layer_ids]
    elif exporter == "modelopt-export":
        saved = {k: v for k, v in tensors.items() if k != "t2d"}  # hf_spec_export.py keeps d2t, not t2d
        config = modelopt_export_config(config, modelopt_keys or {})
    elif exporter == "legacy_fc_norm":
        names = {"fc_norm.0.": "aux_norm_low.", "fc_norm.1.": "aux_norm_mid.", "fc_norm.2.": "aux_norm_high."}
        saved = {next((new + k[len(old):] for old, new in names.items() if k.startswith(old)), k): v
                 for k, v in saved.items()}
    save_checkpoint(folder, config, saved)
    return tensors


def modelopt_export_config(config: dict, overrides: dict) -> dict:
    """The config ModelOpt's EagleExporter writes (NVIDIA/Model-Optimizer modelopt/torch/export/plugins/
    hf_spec_configs.py llama_eagle_template_config): EAGLE flags and ModelOpt's own keys in eagle_config, the aux ids
    there in ModelOpt's meaning (the output of layer i: ours - 1)."""
    nested = config.setdefault("eagle_config", {})
    for key in ("norm_before_fc", "fc_norm", "norm_output"):
        if key in config:
            nested[key] = config.pop(key)
    ids = config.pop("eagle_aux_hidden_state_layer_ids", None)
    if ids is not None:
        nested["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in ids]
    nested.setdefault("use_aux_hidden_state", "eagle_aux_hidden_state_layer_ids" in nested)
    nested.update({"use_input_layernorm_in_first_layer": True, "use_last_layernorm": True, "use_mtp_layernorm": False,
                   "next_layer_regular": True, "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1,
                   **overrides})
    config.update(architectures=["LlamaForCausalLMEagle3"], tie_word_embeddings=False)
    return config
