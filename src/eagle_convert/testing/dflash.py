"""Tiny DFlash drafts (z-lab and speculators layouts, JetSpec's causal variant) beside a tiny Llama target.

DFlash (z-lab) drafts a block in one forward: the bonus token and `block_size - 1` mask tokens attend to the context
(K/V projected from the target's tapped states) and to each other, without a causal mask (JetSpec: `causal: true`).
It has no embedding or LM head of its own: the target's are used. Two layouts carry the same tensors
(`layers.{i}.*` Qwen3 blocks with q/k norms, `fc`, `hidden_norm`, `norm`):

- z-lab: a Qwen3 config with `architectures: [DFlashDraftModel]` (or `Qwen3DFlashDraftModel`) and
  `dflash_config.{mask_token_id, target_layer_ids, block_size}`; `target_layer_ids` counts the OUTPUT of layer i.
- speculators 0.9 (`speculators_model_type: dflash`): `transformer_layer_config` plus top-level `block_size`,
  `mask_token_id`, `aux_hidden_state_layer_ids` counted as the INPUT of layer i (= target_layer_ids + 1; vLLM's
  reader, transformers_utils/configs/speculators/algos.py `update_dflash`, subtracts 1) and
  `sliding_window_non_causal`, which vLLM turns into `dflash_config.causal = not sliding_window_non_causal` for
  EVERY layer (absent: non-causal). speculators' own default (False) therefore means causal in vLLM.

`agree=True` builds a target and head where the head's first proposal is the target's next greedy token, and only
when the taps are the intended ones (see `agree_target_tensors` / `agree_head_tensors`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..taps.conventions import translate
from .tiny import TinyConfig, _norm, _rand, make_target, save_checkpoint, target_tensors, write_tokenizer

# vLLM's CPU attention takes head_dim 32 and up: hidden 128 over 4 heads. 4 layers so that taps can differ.
TARGET = TinyConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=256, vocab_size=256)
TARGET_LAYER_IDS = [0, 2]  # output convention; never the last layer (speculators' converter drops it, see README)
BLOCK_SIZE = 4  # bonus + 3 masks: vLLM's num_speculative_tokens = block_size - 1
DRAFT_ROPE_THETA = 1_000_000.0  # the draft's own RoPE base, unlike the target's 10000: a reference must use it


def mask_token_id_of(cfg: TinyConfig) -> int:
    """The target's last id, as real checkpoints reserve a special token for the mask."""
    return cfg.vocab_size - 1


def draft_config(cfg: TinyConfig, *, layers: int) -> dict:
    """The draft's Qwen3 block config (num_key_value_heads = heads: the agreeing head needs v_proj square)."""
    h = cfg.hidden_size
    return {
        "model_type": "qwen3", "hidden_size": h, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_attention_heads, "head_dim": h // cfg.num_attention_heads,
        "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": DRAFT_ROPE_THETA,
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "vocab_size": cfg.vocab_size, "torch_dtype": "float32",
    }


def random_head_tensors(cfg: TinyConfig, *, layers: int, n_taps: int, seed: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, i = cfg.hidden_size, cfg.intermediate_size
    d = h // cfg.num_attention_heads
    t = {"fc.weight": _rand(g, h, n_taps * h, scale=0.1), "hidden_norm.weight": _norm(g, h),
         "norm.weight": _norm(g, h)}
    for n in range(layers):
        p = f"layers.{n}."
        t.update({
            p + "self_attn.q_proj.weight": _rand(g, h, h, scale=0.2),
            p + "self_attn.k_proj.weight": _rand(g, h, h, scale=0.2),
            p + "self_attn.v_proj.weight": _rand(g, h, h, scale=0.2),
            p + "self_attn.o_proj.weight": _rand(g, h, h, scale=0.2),
            p + "self_attn.q_norm.weight": _norm(g, d), p + "self_attn.k_norm.weight": _norm(g, d),
            p + "mlp.gate_proj.weight": _rand(g, i, h, scale=0.2), p + "mlp.up_proj.weight": _rand(g, i, h, scale=0.2),
            p + "mlp.down_proj.weight": _rand(g, h, i, scale=0.2),
            p + "input_layernorm.weight": _norm(g, h), p + "post_attention_layernorm.weight": _norm(g, h),
        })
    return t


def agree_target_tensors(cfg: TinyConfig = TARGET, seed: int = 0) -> dict[str, torch.Tensor]:
    """A target whose next greedy token depends on the current token only (attention outputs zero, as tiny.py's
    agreeing targets): embeddings and the LM head use only the first half of the dimensions, the mask token's
    embedding is zero, every MLP is zero except layer 1's, which writes into the second half only. So the output of
    layer 0 is the embedding with an empty second half, every later output has it filled, and the second half never
    moves a logit (the final norm is all ones: a positive rescaling)."""
    t = target_tensors(cfg, seed, zero_attention=True)
    half = cfg.hidden_size // 2
    t["model.embed_tokens.weight"][:, half:] = 0
    t["model.embed_tokens.weight"][mask_token_id_of(cfg)] = 0
    t["lm_head.weight"][:, half:] = 0
    for n in range(cfg.num_hidden_layers):
        down = t[f"model.layers.{n}.mlp.down_proj.weight"]
        if n == 1:
            down.copy_(_rand(torch.Generator().manual_seed(seed + 11), *down.shape, scale=0.5))
            down[:half] = 0
        else:
            down.zero_()
    return t


def agree_head_tensors(cfg: TinyConfig = TARGET, *, layers: int = 1, n_taps: int = 2) -> dict[str, torch.Tensor]:
    """A head whose mask positions propose argmax(lm_head . embedding[bonus]) = the target's next token after the
    bonus, when its first tap is the output of layer 0 of agree_target_tensors' target.

    q_proj = 0: every query scores every key 0, so attention is a plain mean of the values it sees. v_proj = o_proj =
    identity and input_layernorm = ones: the bonus contributes its normalised embedding; mask tokens contribute 0
    (their embedding is 0). fc moves the second half of the first tap into the first half: with the intended tap
    (layer 0's output, second half empty) it is 0, hidden_norm(0) = 0 and the context adds nothing; with a tap one
    layer deeper it carries layer 1's MLP output, normalised to unit size, into the dimensions the LM head reads,
    and the proposals change. MLPs are zero, norm is ones: the proposal is the argmax over the mean, a positive
    multiple of the bonus's embedding. Causal or not, every mask position sees the bonus: the same proposals."""
    t = random_head_tensors(cfg, layers=layers, n_taps=n_taps)
    h, half = cfg.hidden_size, cfg.hidden_size // 2
    fc = torch.zeros(h, n_taps * h)
    fc[:half, half:h] = torch.eye(half)
    t.update({"fc.weight": fc, "norm.weight": torch.ones(h)})
    for n in range(layers):
        p = f"layers.{n}."
        t.update({p + "self_attn.q_proj.weight": torch.zeros(h, h), p + "self_attn.v_proj.weight": torch.eye(h),
                  p + "self_attn.o_proj.weight": torch.eye(h), p + "input_layernorm.weight": torch.ones(h),
                  p + "mlp.down_proj.weight": torch.zeros_like(t[p + "mlp.down_proj.weight"])})
    return t


def zlab_config(cfg: TinyConfig, *, layers: int, target_layer_ids: list[int], block_size: int = BLOCK_SIZE,
                causal: bool | None = None, architecture: str = "DFlashDraftModel") -> dict:
    c = draft_config(cfg, layers=layers)
    dflash = {"mask_token_id": mask_token_id_of(cfg), "target_layer_ids": list(target_layer_ids),
              "block_size": block_size}
    if causal is not None:  # JetSpec (NeMo): dflash_config.causal
        dflash["causal"] = causal
    c.update(architectures=[architecture], auto_map={"AutoModel": "dflash.DFlashDraftModel"},
             num_target_layers=cfg.num_hidden_layers, dflash_config=dflash)
    return c


def speculators_config(cfg: TinyConfig, *, layers: int, target_layer_ids: list[int], verifier: str,
                       block_size: int = BLOCK_SIZE, causal: bool = False) -> dict:
    """speculators 0.9's DFlashSpeculatorConfig as it serialises (models/dflash/config.py), aux ids in the input
    convention. `sliding_window_non_causal` is written as `not causal`, which is what vLLM's reader inverts."""
    layer = draft_config(cfg, layers=layers)
    layer["architectures"] = ["Qwen3ForCausalLM"]
    return {
        "architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash", "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "dflash", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": block_size - 1,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": cfg.hf_config()["architectures"]},
        },
        "transformer_layer_config": layer, "draft_vocab_size": cfg.vocab_size, "block_size": block_size,
        "aux_hidden_state_layer_ids": translate(target_layer_ids, "dflash", "speculators-dflash"),
        "mask_token_id": mask_token_id_of(cfg),
        "sliding_window_non_causal": not causal, "sample_from_anchor": False, "torch_dtype": "float32",
    }


def build_dflash_set(root: Path, *, agree: bool = False, layers: int = 2, cfg: TinyConfig = TARGET,
                     target_layer_ids: list[int] | None = None) -> dict[str, Path]:
    """target/ plus the same head as zlab/, zlab-qwen3/ (Qwen3DFlashDraftModel), jetspec/ (causal: true) and
    speculators/ (verifier = target/, absolute). agree: agree_target_tensors + agree_head_tensors (1 layer by
    default is enough; `layers` is honoured)."""
    root = Path(root).resolve()
    ids = list(target_layer_ids or TARGET_LAYER_IDS)
    if agree:
        save_checkpoint(root / "target", cfg.hf_config(), agree_target_tensors(cfg))
        write_tokenizer(root / "target", cfg.vocab_size)
        head = agree_head_tensors(cfg, layers=layers, n_taps=len(ids))
    else:
        make_target(root / "target", cfg)
        head = random_head_tensors(cfg, layers=layers, n_taps=len(ids))
    out = {"target": root / "target"}
    variants = {"zlab": {}, "zlab-qwen3": {"architecture": "Qwen3DFlashDraftModel"}, "jetspec": {"causal": True}}
    for name, extra in variants.items():
        save_checkpoint(root / name, zlab_config(cfg, layers=layers, target_layer_ids=ids, **extra), head)
        out[name] = root / name
    spec = speculators_config(cfg, layers=layers, target_layer_ids=ids, verifier=str(root / "target"))
    save_checkpoint(root / "speculators", spec, head)
    out["speculators"] = root / "speculators"
    return out


def read_dflash(folder: Path) -> dict:
    """The facts a DFlash forward needs from either layout, in the output convention."""
    c = json.loads((Path(folder) / "config.json").read_text())
    if c.get("speculators_model_type") == "dflash":
        layer = c["transformer_layer_config"]
        ids = translate(c["aux_hidden_state_layer_ids"], "speculators-dflash", "dflash")
        return {"config": layer, "target_layer_ids": ids,
                "mask_token_id": c["mask_token_id"], "block_size": c["block_size"],
                "causal": not c.get("sliding_window_non_causal", True)}
    d = c["dflash_config"]
    return {"config": c, "target_layer_ids": d["target_layer_ids"], "mask_token_id": d["mask_token_id"],
            "block_size": d.get("block_size", c.get("block_size")), "causal": bool(d.get("causal", False))}
