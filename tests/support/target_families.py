"""Tiny random checkpoints of every target family, saved by transformers itself (the names are transformers', never
typed from memory), sharded so that the LM head's shard differs from the embedding's.

`save_family(name, folder, tied=...)` returns the transformers model it saved, so a test compares what convert spliced
with `model.get_output_embeddings().weight` / `model.get_input_embeddings().weight`.

Both namings come from transformers itself. Its `conversion_mapping.py` (5.24) renames pre-2025 checkpoints on load,
and `save_pretrained(save_original_format=True)` (the default) applies the reverse mapping, writing the names the
Hub's checkpoints have; `save_original_format=False` writes the names of today's modules:
- "llava" (gemma3 and mistral3 through `_MODEL_TO_CONVERSION_PATTERN`): `^language_model.lm_head -> lm_head`,
  `^language_model -> model.language_model`: the old names are `language_model.lm_head.weight` and
  `language_model.model.*`;
- "Qwen2VLForConditionalGeneration" (also Qwen2_5_VL): `^model(?!\\.(language_model|visual)) ->
  model.language_model`: the old names are `model.embed_tokens.weight` and `lm_head.weight`.
`test_target_families.py` asserts those old names, so a transformers that changed them fails there, not silently.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

H, V, LAYERS, HEADS, KV, INTER = 32, 128, 2, 4, 2, 64
TEXT = dict(hidden_size=H, vocab_size=V, num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV,
            intermediate_size=INTER, head_dim=H // HEADS, max_position_embeddings=256)
VISION_QWEN = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=H, patch_size=2,
                   temporal_patch_size=1, spatial_merge_size=1, in_channels=3)
SIGLIP = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=8,
              patch_size=4)


def _config(family: str, tied: bool, **overrides):
    import transformers as tf

    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    text = dict(TEXT, tie_word_embeddings=tied, **overrides)
    if family in ("llama", "mistral", "qwen2", "qwen3"):
        cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config, "qwen3": tf.Qwen3Config}
        return cls[family](**text), family
    if family == "qwen3_moe":
        return tf.Qwen3MoeConfig(**{"decoder_sparse_step": 1, "norm_topk_prob": True, **moe, **text}), family
    if family == "mixtral":
        return tf.MixtralConfig(**text, num_local_experts=4, num_experts_per_tok=2), family
    if family == "gpt_oss":
        return tf.GptOssConfig(**text, num_local_experts=4, num_experts_per_tok=2, layer_types=None), family
    if family == "deepseek_v3":
        return tf.DeepseekV3Config(**dict(text, head_dim=None), n_routed_experts=4, num_experts_per_tok=2, n_group=1,
                                   topk_group=1, moe_intermediate_size=32, first_k_dense_replace=1, kv_lora_rank=16,
                                   q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8), family
    if family == "glm4_moe":
        return tf.Glm4MoeConfig(**text, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                moe_intermediate_size=32, first_k_dense_replace=1), family
    if family == "llama4":
        vision = tf.Llama4VisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, image_size=8, patch_size=4, vision_output_dim=16,
                                       projector_input_dim=16, projector_output_dim=H)
        textcfg = tf.Llama4TextConfig(**dict(text, intermediate_size_mlp=INTER), num_local_experts=2,
                                      num_experts_per_tok=1, interleave_moe_layer_step=1)
        return tf.Llama4Config(vision_config=vision.to_dict(), text_config=textcfg.to_dict(),
                               tie_word_embeddings=tied), family
    if family == "qwen2_5_vl":  # mrope sections must sum to head_dim / 2 (4 here)
        text = dict(text, rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 1, 1]})
        return tf.Qwen2_5_VLConfig(text_config=text, vision_config=dict(VISION_QWEN, fullatt_block_indexes=[0]),
                                   tie_word_embeddings=tied), family
    if family == "qwen3_vl":
        return tf.Qwen3VLConfig(text_config=text, vision_config=dict(VISION_QWEN, num_position_embeddings=16,
                                                                     deepstack_visual_indexes=[0]),
                                tie_word_embeddings=tied), family
    if family == "mistral3":
        return tf.Mistral3Config(text_config=dict(text, model_type="mistral"),
                                 vision_config=dict(model_type="pixtral", hidden_size=16, intermediate_size=32,
                                                    num_hidden_layers=1, num_attention_heads=2, image_size=8,
                                                    patch_size=4, head_dim=8),
                                 tie_word_embeddings=tied), family
    if family == "gemma3":
        return tf.Gemma3Config(text_config=dict(text, model_type="gemma3_text"),
                               vision_config=dict(SIGLIP, model_type="siglip_vision_model"), mm_tokens_per_image=4,
                               tie_word_embeddings=tied), family
    raise KeyError(family)


# family -> (model class name in transformers, tied variants the family ships). Text-only and conditional-generation.
FAMILIES = {
    "llama": ("LlamaForCausalLM", (False, True)),
    "mistral": ("MistralForCausalLM", (False,)),
    "qwen2": ("Qwen2ForCausalLM", (False, True)),
    "qwen3": ("Qwen3ForCausalLM", (False, True)),
    "qwen3_moe": ("Qwen3MoeForCausalLM", (False,)),
    "mixtral": ("MixtralForCausalLM", (False,)),
    "gpt_oss": ("GptOssForCausalLM", (False,)),
    "deepseek_v3": ("DeepseekV3ForCausalLM", (False,)),
    "glm4_moe": ("Glm4MoeForCausalLM", (False,)),
    "llama4": ("Llama4ForConditionalGeneration", (False,)),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", (False, True)),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", (False, True)),
    "mistral3": ("Mistral3ForConditionalGeneration", (False,)),
    "gemma3": ("Gemma3ForConditionalGeneration", (True,)),
}
# Families whose checkpoints on the Hub also exist under the pre-2025 names (see the module docstring).
LEGACY = ("qwen2_5_vl", "mistral3", "gemma3")


def build_model(family: str, tied: bool, seed: int = 0, **overrides):
    import transformers as tf

    config, _ = _config(family, tied, **overrides)
    torch.manual_seed(seed)
    model = getattr(tf, FAMILIES[family][0])(config).eval()
    with torch.no_grad():  # random, not transformers' init: a zero or constant tensor would hide a wrong splice
        for p in model.parameters():
            p.normal_(0, 0.02 if p.dim() > 1 else 1.0)
    return model


def save_family(family: str, folder: Path, *, tied: bool = False, original_format: bool = True, seed: int = 0,
                **overrides):
    """save_pretrained of a tiny random model, in shards small enough that embedding and LM head part.
    `original_format`: the names the Hub's checkpoints have (pre-2025 for the renamed families), else today's."""
    model = build_model(family, tied, seed, **overrides)
    model.save_pretrained(folder, max_shard_size="20KB", save_original_format=original_format)
    embed, head = saved_names(folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    assert (head is None) == tied, f"{family}: tied={tied} but the saved LM head is {head}"
    assert tied or index[embed] != index[head], f"{family}: embedding and LM head share a shard"
    return model


def saved_names(folder: Path) -> tuple[str, str | None]:
    """The saved input embedding and LM head (None when tied: transformers saves the shared tensor once)."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    embeds = [n for n in index if n.endswith("embed_tokens.weight")]
    heads = [n for n in index if n.endswith("lm_head.weight")]
    assert len(embeds) == 1 and len(heads) <= 1, (embeds, heads)
    return embeds[0], heads[0] if heads else None


def shard_of(folder: Path, name: str) -> str:
    return json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"][name]
