"""A tiny Qwen3-MoE target (transformers `Qwen3MoeForCausalLM.save_pretrained`, the Hub's per-expert names) and an
EAGLE-3 head in its released layout (`midlayer.*`) that real vLLM (CPU) can load: sizes as make_tiny_vllm_pair.py's
(head_dim 32), 4 experts, top-2 routing, every layer sparse.

Structured weights give partial acceptance, as in make_tiny_vllm_pair.py: the target's greedy continuation is mostly
t -> t+1 (its LM head is the embedding rolled by one; its attention and expert outputs, scaled by `successor`, only
perturb the residual stream), and the head mostly proposes the next-next token at its first position.

  python scripts/engines/make_tiny_moe_pair.py OUT        writes OUT/target, OUT/eagle3-release, OUT/prompts.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle_convert.testing.vllm_pairs import (
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_HEADS,
    RELEASE_PROMPTS,
    RMS_EPS,
    _eagle3_tensors,
    _llama_fields,
    fill_weights,
)

EXPERTS, TOP_K, MOE_INTERMEDIATE, LAYERS, VOCAB = 4, 2, 64, 4, 256
AUX_LAYER_IDS = [1, 2, 3]


def build_target(out: Path, gen: torch.Generator, successor: float) -> dict[str, torch.Tensor]:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=4 * HIDDEN, moe_intermediate_size=MOE_INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        num_experts=EXPERTS, num_experts_per_tok=TOP_K, norm_topk_prob=True, decoder_sparse_step=1,
        rms_norm_eps=RMS_EPS, rope_theta=1e6, max_position_embeddings=512, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2)
    config.architectures = ["Qwen3MoeForCausalLM"]
    model = Qwen3MoeForCausalLM(config).to(torch.float32)
    fill_weights(model, gen, successor)
    emb = model.model.embed_tokens.weight
    model.save_pretrained(str(out))  # the Hub's names: one tensor per expert
    return {"model.embed_tokens.weight": emb.detach().clone()}


def build_moe_release(root: Path, *, successor: float = 1.4, seed: int = 0) -> dict[str, Path]:
    root = Path(root).resolve()
    gen = torch.Generator().manual_seed(seed)
    target_sd = build_target(root / "target", gen, successor)
    e3 = _eagle3_tensors(gen, vocab=VOCAB, draft_vocab=128, n_aux=len(AUX_LAYER_IDS), prefix="midlayer.",
                         target_sd=target_sd, successor=successor)
    cfg = _llama_fields(VOCAB, 1, 10000.0, 512)
    cfg.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", draft_vocab_size=128,
               eagle_aux_hidden_state_layer_ids=AUX_LAYER_IDS)
    (root / "eagle3-release").mkdir(parents=True)
    save_file(e3, root / "eagle3-release" / "model.safetensors", metadata={"format": "pt"})
    (root / "eagle3-release" / "config.json").write_text(json.dumps(cfg, indent=2))
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt_ids": ids}) + "\n"
                               for i, ids in enumerate(RELEASE_PROMPTS)))
    return {"root": root, "target": root / "target", "eagle3": root / "eagle3-release", "prompts": prompts}
