"""The tensor set an MTP layer must hold, derived from the target's config and its family's row: the MTP-specific
tensors, the decoder block (attention per architecture, dense MLP or MoE experts x 3 + router + shared experts), and
for block-FP8 targets a `weight_scale_inv` beside every FP8 weight (checked in locate.py, where dtypes are known).
vLLM does not check this (a layer missing q_proj loads silently), so the extractor does."""

from __future__ import annotations

from ..errors import CorruptCheckpointError
from .families import COUNT_KEYS, MtpFamily, text_config


def config_int(config: dict, key: str, default: int | None = None) -> int | None:
    """An integer config value, or `default` when absent or null; anything else is a corrupt config."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CorruptCheckpointError(f"config.json has {key}: {value!r}, not a count.",
                                     f"Fix {key} in config.json: it is a non-negative integer.")
    return value


def declared_layers(config: dict) -> tuple[str | None, int]:
    """(the key that counts MTP layers, its value): the first of COUNT_KEYS present, in the config or its
    text_config; (None, 0) when none is."""
    for cfg in (config, text_config(config)):
        for key in COUNT_KEYS:
            if cfg.get(key) is not None:
                return key, config_int(cfg, key)
    return None, 0


def trunk_layers(family: MtpFamily, config: dict) -> int:
    """The trunk's layer count as this checkpoint numbers MTP layers after it: the config's num_hidden_layers, but 0
    in SGLang's NextN layout (`...NextN` architecture), which renumbers the one MTP layer to 0 and says
    `num_hidden_layers: 1` of that layer, not of the trunk."""
    if family.nextn_architecture and family.nextn_architecture in (config.get("architectures") or []):
        return 0
    return config_int(text_config(config), "num_hidden_layers", 0)


def _switch(setting: bool | str, cfg: dict) -> bool:
    return bool(cfg.get(setting)) if isinstance(setting, str) else setting


def attention_names(family: MtpFamily, cfg: dict) -> list[str]:
    if family.attention == "mla":
        q = (["q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"] if cfg.get("q_lora_rank")
             else ["q_proj.weight"])
        names = q + ["kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight"]
    else:
        names = [f"{p}_proj.weight" for p in "qkvo"]
        if _switch(family.qkv_bias, cfg):
            names += [f"{p}_proj.bias" for p in "qkv"]
        if _switch(family.qk_norm, cfg):
            names += ["q_norm.weight", "k_norm.weight"]
    return [f"self_attn.{n}" for n in names]


def _ffn(prefix: str) -> list[str]:
    return [f"{prefix}.{p}_proj.weight" for p in ("gate", "up", "down")]


def mlp_names(family: MtpFamily, cfg: dict) -> list[str]:
    if family.mlp == "deepseek_moe":  # DeepSeek-V3 / GLM-4.5: every MTP layer is MoE (transformers' get_mtp_config)
        names = ["mlp.gate.weight"]
        if cfg.get("topk_method", "noaux_tc") == "noaux_tc":  # the router's correction bias comes with noaux_tc
            names.append("mlp.gate.e_score_correction_bias")
        for e in range(config_int(cfg, "n_routed_experts", 0)):
            names += _ffn(f"mlp.experts.{e}")
        if config_int(cfg, "n_shared_experts", 0):
            names += _ffn("mlp.shared_experts")
        return names
    if family.mlp == "qwen_moe" and config_int(cfg, "num_experts", 0):
        names = ["mlp.gate.weight"]
        for e in range(config_int(cfg, "num_experts", 0)):
            names += _ffn(f"mlp.experts.{e}")
        if config_int(cfg, "shared_expert_intermediate_size", 0):
            names += _ffn("mlp.shared_expert") + ["mlp.shared_expert_gate.weight"]
        return names
    return _ffn("mlp")


def block_names(family: MtpFamily, cfg: dict) -> list[str]:
    """The decoder block's tensors, relative to the block prefix."""
    return (list(family.norms) + attention_names(family, cfg) + mlp_names(family, cfg)
            + [name for switch, name in family.extras if _switch(switch, cfg)])


def expected_names(family: MtpFamily, config: dict, i: int) -> tuple[list[str], list[str]]:
    """(required, optional) tensor names of MTP layer `i` (0-based). Optional: the embedding / head copies."""
    cfg = text_config(config)
    n = trunk_layers(family, config)
    index = family.layer_index(i, n)
    fill = {"L": index, "n": n}
    block = family.block.format(**fill)
    own = [t.format(**fill) for t in family.own]
    return own + [block + b for b in block_names(family, cfg)], [t.format(**fill) for t in family.copies]
