"""MTP (multi-token prediction / NextN) families as data: where a release keeps its MTP layers, how they are named,
which config key counts them, the order the fusion projection concatenates its inputs in, which copies of the
embedding / head a release carries, and how the decoder block is built (signature.py derives its tensor set from
the config). One row per family; docs/mtp.md prints the table and says how each row was checked.

Name templates: `{L}` is a layer's index as the checkpoint numbers it, `{n}` the trunk's num_hidden_layers. An
"appended" family numbers its MTP layers after the trunk's (L = n + i, DeepSeek / GLM); the others from 0."""

from __future__ import annotations

import re
from dataclasses import dataclass

COUNT_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")  # the keys that count MTP layers
# Keys that promise MTP layers in families outside the table (MiniMax-M2.x: `use_mtp`, `num_mtp_modules`).
PROMISE_KEYS = COUNT_KEYS + ("num_mtp_modules", "use_mtp")
EMB_HIDDEN, HIDDEN_EMB = "[emb, hidden]", "[hidden, emb]"


@dataclass(frozen=True)
class MtpFamily:
    name: str
    title: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    area: str  # regex over tensor names: everything the MTP layers own (look-alikes are found here too)
    block: str  # prefix template of the decoder block inside layer L
    own: tuple[str, ...]  # the MTP-specific tensors of layer L (templates), fusion projection first
    copies: tuple[str, ...] = ()  # embedding / head copies some releases carry (optional: engines share the target's)
    concat: str = EMB_HIDDEN  # what the fusion projection's input concatenates, in order
    appended: bool = False  # layers numbered after the trunk's (L = n + i)
    attention: str = "gqa"  # "gqa" (q/k/v/o), "mla" (DeepSeek latent attention), "gated" (Qwen3-Next: 2x q_proj)
    qkv_bias: bool | str = False  # True, or the config key that switches q/k/v biases on
    qk_norm: bool | str = False  # True, or the config key that switches q_norm / k_norm on
    mlp: str = "dense"  # "dense", "deepseek_moe" (routed + shared experts, router bias), "qwen_moe"
    nextn_architecture: str | None = None  # SGLang's NextN architecture (export_deepseek_nextn.py layout)
    names_from: str = ""  # where the name set comes from (docs/mtp.md)
    # The decoder block's two norms: pre-norm blocks name them input / post_attention; MiMo-V2 calls the second
    # pre_mlp_layernorm; EXAONE-4 is post-norm (post_attention + post_feedforward, no input_layernorm).
    norms: tuple[str, ...] = ("input_layernorm.weight", "post_attention_layernorm.weight")
    extras: tuple[tuple[bool | str, str], ...] = ()  # (switch as qkv_bias, block tensor) present when switched on

    def layer_index(self, i: int, trunk_layers: int) -> int:
        return trunk_layers + i if self.appended else i

    def in_area(self, name: str, trunk_layers: int) -> bool:
        m = re.match(self.area, name)
        if m is None:
            return False
        return not self.appended or int(m.group(1)) >= trunk_layers


APPENDED_OWN = ("model.layers.{L}.eh_proj.weight", "model.layers.{L}.enorm.weight", "model.layers.{L}.hnorm.weight",
                "model.layers.{L}.shared_head.norm.weight")
APPENDED_COPIES = ("model.layers.{L}.embed_tokens.weight", "model.layers.{L}.shared_head.head.weight")
QWEN_OWN = ("mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight")

FAMILIES: tuple[MtpFamily, ...] = (
    MtpFamily("deepseek_v3", "DeepSeek-V3 / R1 / V3.1", ("deepseek_v3",), ("DeepseekV3ForCausalLM",),
              area=r"^model\.layers\.(\d+)\.", block="model.layers.{L}.", own=APPENDED_OWN, copies=APPENDED_COPIES,
              appended=True, attention="mla", mlp="deepseek_moe", nextn_architecture="DeepseekV3ForCausalLMNextN",
              names_from="DeepSeek-R1's tensor table (layer 61 in model-00163-of-000163); vLLM deepseek_mtp.py; "
                         "SGLang deepseek_weight_loader.py"),
    MtpFamily("glm4_moe", "GLM-4.5 / 4.6 / 4.7 (incl. Air)", ("glm4_moe",), ("Glm4MoeForCausalLM",),
              area=r"^model\.layers\.(\d+)\.", block="model.layers.{L}.", own=APPENDED_OWN, copies=APPENDED_COPIES,
              appended=True, qkv_bias="attention_bias", qk_norm="use_qk_norm", mlp="deepseek_moe",
              nextn_architecture="Glm4MoeForCausalLMNextN",
              names_from="vLLM glm4_moe_mtp.py and SGLang glm4_moe.py loaders; vLLM PR #27597 (GLM-4.6 has no "
                         "embed_tokens / shared_head.head copies)"),
    MtpFamily("qwen3_next", "Qwen3-Next", ("qwen3_next",), ("Qwen3NextForCausalLM",),
              area=r"^mtp\.", block="mtp.layers.{L}.", own=QWEN_OWN, attention="gated", qk_norm=True,
              mlp="qwen_moe", names_from="vLLM qwen3_next_mtp.py; the speculators MTP converter's tensor count of "
                                         "Qwen3-Next-80B-A3B"),
    MtpFamily("qwen3_5", "Qwen3.5 / 3.6", ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"),
              ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"),
              area=r"^mtp\.", block="mtp.layers.{L}.", own=QWEN_OWN, attention="gated", qk_norm=True,
              mlp="qwen_moe", names_from="vLLM qwen3_5_mtp.py; Model-Optimizer PR #2427 (15 mtp.* tensors, dense)"),
    MtpFamily("mimo", "MiMo-7B", ("mimo",), ("MiMoForCausalLM",),
              area=r"^model\.mtp_layers\.", block="model.mtp_layers.{L}.",
              own=("model.mtp_layers.{L}.input_proj.weight", "model.mtp_layers.{L}.token_layernorm.weight",
                   "model.mtp_layers.{L}.hidden_layernorm.weight", "model.mtp_layers.{L}.final_layernorm.weight"),
              concat=HIDDEN_EMB, qkv_bias=True,
              names_from="remote modeling_mimo.py (MiMoMTPLayers); vLLM mimo_mtp.py"),
    MtpFamily("mimo_v2", "MiMo-V2 (Flash / Pro)", ("mimo_v2", "mimo_v2_flash"),
              ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"),
              area=r"^model\.mtp\.", block="model.mtp.layers.{L}.",
              own=("model.mtp.layers.{L}.eh_proj.weight", "model.mtp.layers.{L}.enorm.weight",
                   "model.mtp.layers.{L}.hnorm.weight", "model.mtp.layers.{L}.final_layernorm.weight"),
              qkv_bias="attention_bias", norms=("input_layernorm.weight", "pre_mlp_layernorm.weight"),
              extras=(("add_swa_attention_sink_bias", "self_attn.attention_sink_bias"),),
              names_from="vLLM mimo_v2_mtp.py (separate q/k/v as MiMo-V2-Flash stores them; vLLM serves layer 0 "
                         "only)"),
    MtpFamily("exaone4_5", "EXAONE-4.5", ("exaone4_5",), ("Exaone4_5_ForConditionalGeneration",),
              area=r"^mtp\.", block="mtp.layers.{L}.", own=QWEN_OWN, qk_norm=True, qkv_bias="attention_bias",
              norms=("post_attention_layernorm.weight", "post_feedforward_layernorm.weight"),
              extras=(("attention_bias", "self_attn.o_proj.bias"), ("mlp_bias", "mlp.gate_proj.bias"),
                      ("mlp_bias", "mlp.up_proj.bias"), ("mlp_bias", "mlp.down_proj.bias")),
              names_from="vLLM exaone4_5_mtp.py (mtp.* renamed to model.*) over exaone4.py's post-norm decoder "
                         "layer"),
    MtpFamily("ernie4_5_moe", "ERNIE-4.5-MoE", ("ernie4_5_moe",), ("Ernie4_5_MoeForCausalLM",),
              area=r"^model\.mtp_", block="model.mtp_block.{L}.",
              own=("model.mtp_linear_proj.{L}.weight", "model.mtp_emb_norm.{L}.weight",
                   "model.mtp_hidden_norm.{L}.weight"), qkv_bias="use_bias",
              names_from="vLLM ernie_mtp.py WeightsMapper (mtp_block is a Llama decoder layer)"),
)

# Look-alikes: other drafters under an MTP prefix. DeepSeek-V4.1 ships DSpark stages under `mtp.{i}.*`.
DSPARK_MODEL_TYPES = ("deepseek_v41",)
DSPARK_NAMES = re.compile(r"(^|\.)mtp\.\d+\.(main_proj|main_norm|markov_head|confidence_head)(\.|$)")


def text_config(config: dict) -> dict:
    """The language model's config: `text_config` for a multimodal wrapper (Qwen3.5), else the config itself."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def family_for(config: dict) -> MtpFamily | None:
    """The row whose architecture (checked first: MiMo is `model_type: qwen2`) or model_type the config names."""
    archs = config.get("architectures") or []
    for family in FAMILIES:
        if any(a in family.architectures for a in archs):
            return family
    types = {config.get("model_type"), text_config(config).get("model_type")}
    return next((f for f in FAMILIES if types & set(f.model_types)), None)


def family_names() -> str:
    return ", ".join(f.title for f in FAMILIES)
