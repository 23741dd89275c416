"""The tiny pair the llama.cpp and OpenVINO tiers run: a 12-layer Llama target (OpenVINO GenAI asserts at least 10)
with a SentencePiece tokenizer (support/spm.py), and an EAGLE-3 head in the released layout (`midlayer.*`,
`LlamaForCausalLMEagle3`, fp32) tapping layers 2, 6, 9 in EAGLE's count (the INPUT of layer i), built to agree with
its target through exactly those taps.

How it agrees (the tiny.py idea: zero attention makes every state a function of the current token alone). The hidden
size is split in halves A | B. The embedding lives in A; the LM head reads A and is the embedding rolled by one, so
the target's greedy continuation is t -> t+1 exactly. Every layer's attention and MLP output is zero except layer 9's
MLP, which writes a large token-dependent vector into B (the LM head never reads B, and the final norm only rescales).
So the input of layer 9 is E[t] and the input of layer 10 (= GenAI's "output of layer 9") is E[t] + B9(t). The head's
fc passes tap 9's A half through and multiplies its B half by a large random matrix, its layer adds nothing, and its
LM head row d is E[d2t(d) - 2]: fed the right state it proposes t+2 at the first draft position (the target's next
token after t+1) whenever t+2 is in its draft vocabulary; fed layer 10's input it proposes noise. Later draft
positions repeat t+2 and are rejected, so acceptance is partial."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from eagle_convert.testing.tiny import save_checkpoint
from support.spm import text_of, write_tokenizer

LAYERS, TAPS, VOCAB, DRAFT_VOCAB = 12, [2, 6, 9], 256, 192
HIDDEN, HEADS, KV_HEADS, INTERMEDIATE = 128, 4, 2, 256
HALF = HIDDEN // 2
# letter ids only (support/spm.py), far enough from the vocabulary's end that t -> t+1 reaches no special id
PROMPT_IDS = [[17, 42, 99, 5], [120, 77, 30], [9, 9, 64, 31, 50]]


def _llama_config(layers: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "head_dim": HIDDEN // HEADS, "num_hidden_layers": layers, "vocab_size": VOCAB, "hidden_act": "silu",
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "bos_token_id": 1,
            "eos_token_id": 2, "torch_dtype": "float32"}


def _block(g: torch.Generator, prefix: str, qkv_in: int, down: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """A Llama block whose attention adds nothing (o_proj = 0) and whose MLP adds `down`'s image (0 when None)."""
    kv = KV_HEADS * HIDDEN // HEADS
    return {f"{prefix}self_attn.q_proj.weight": torch.randn(HIDDEN, qkv_in, generator=g) * 0.05,
            f"{prefix}self_attn.k_proj.weight": torch.randn(kv, qkv_in, generator=g) * 0.05,
            f"{prefix}self_attn.v_proj.weight": torch.randn(kv, qkv_in, generator=g) * 0.05,
            f"{prefix}self_attn.o_proj.weight": torch.zeros(HIDDEN, HIDDEN),
            f"{prefix}mlp.gate_proj.weight": torch.randn(INTERMEDIATE, HIDDEN, generator=g) * 0.2,
            f"{prefix}mlp.up_proj.weight": torch.randn(INTERMEDIATE, HIDDEN, generator=g) * 0.2,
            f"{prefix}mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE) if down is None else down,
            f"{prefix}post_attention_layernorm.weight": torch.ones(HIDDEN)}


def target_tensors(g: torch.Generator) -> dict[str, torch.Tensor]:
    embed = torch.zeros(VOCAB, HIDDEN)
    embed[:, :HALF] = torch.randn(VOCAB, HALF, generator=g)
    t = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN),
         "lm_head.weight": torch.roll(embed, 1, dims=0) / math.sqrt(HALF)}  # logits_j = <E[j-1], h>: t -> t+1
    for i in range(LAYERS):
        down = None
        if i == TAPS[-1]:  # the layer between the head's last tap and the next one writes into B only
            down = torch.zeros(HIDDEN, INTERMEDIATE)
            down[HALF:] = torch.randn(HALF, INTERMEDIATE, generator=g) * 2.0
        t |= _block(g, f"model.layers.{i}.", HIDDEN, down)
        t[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(HIDDEN)
    return t


def head_tensors(g: torch.Generator, embed: torch.Tensor) -> dict[str, torch.Tensor]:
    fc = torch.zeros(HIDDEN, 3 * HIDDEN)
    last = 2 * HIDDEN  # the columns of the last tap
    fc[:HALF, last:last + HALF] = torch.eye(HALF)
    fc[:, last + HALF:] = torch.randn(HIDDEN, HALF, generator=g)  # B must be 0 here: a shifted tap fills it
    used = torch.sort(torch.randperm(VOCAB - 3, generator=g)[:DRAFT_VOCAB] + 3).values
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[used] = True
    t = {"fc.weight": fc, "norm.weight": torch.ones(HIDDEN), "lm_head.weight": embed[used - 2] / math.sqrt(HALF),
         "d2t": (used - torch.arange(DRAFT_VOCAB)).to(torch.int64), "t2d": t2d}  # released d2t: offsets
    t |= _block(g, "midlayer.", 2 * HIDDEN, None)
    t |= {"midlayer.input_layernorm.weight": torch.ones(HIDDEN), "midlayer.hidden_norm.weight": torch.ones(HIDDEN)}
    return t


def build_engine_pair(root: Path, *, seed: int = 0) -> dict[str, Path]:
    """target/ (with tokenizer.model), eagle3/ (release layout) and engine-prompts.jsonl ({"text", "prompt_ids"})
    under root. prompt_ids are the ids both engines feed their target: <s>, the word boundary "▁", then the letters."""
    root = Path(root)
    g = torch.Generator().manual_seed(seed)
    target = target_tensors(g)
    save_checkpoint(root / "target", _llama_config(LAYERS), target)
    write_tokenizer(root / "target", VOCAB)
    head_config = _llama_config(1) | {"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": DRAFT_VOCAB,
                                      "eagle_aux_hidden_state_layer_ids": TAPS}
    save_checkpoint(root / "eagle3", head_config, head_tensors(g, target["model.embed_tokens.weight"]))
    prompts = root / "engine-prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": text_of(ids), "prompt_ids": [1, 3, *ids]}) + "\n"
                               for ids in PROMPT_IDS))
    return {"target": root / "target", "eagle3": root / "eagle3", "prompts": prompts}
