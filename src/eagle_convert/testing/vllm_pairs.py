"""Build a tiny Llama target and tiny EAGLE draft heads that real vLLM (CPU) can load.

Everything is random but deterministic (fixed seed) and stored in float32. Sizes respect
vLLM's CPU attention (head_dim must be one of 32, 64, 80, 96, 112, 128, ...).

Written under OUT:
  target/        HF Llama checkpoint (transformers ``LlamaForCausalLM(config).save_pretrained``):
                 config.json, generation_config.json, model.safetensors. No tokenizer: run vLLM with
                 ``skip_tokenizer_init=True`` and token-id prompts.
  eagle1/        EAGLE-1 head in vLLM V1 ``method: "eagle"`` layout: config ``LlamaForCausalLM`` /
                 ``model_type: llama``, ``fc.weight`` [H, 2H] (columns [embedding ; feature]),
                 ``layers.0.*`` without ``input_layernorm``, no ``fc.bias``/``norm``/``lm_head``.
                 ``embed_tokens.weight`` is written only with ``eagle1_embed=True`` (a copy of the target's).
  eagle3/        EAGLE-3 head in vLLM V1 ``method: "eagle3"`` layout: ``layers.0.*`` (q/k/v take 2H inputs),
                 ``hidden_norm``, ``input_layernorm``, ``post_attention_layernorm``, ``fc.weight`` [H, 3H],
                 ``norm.weight``, ``lm_head.weight`` [draft_vocab, H], ``d2t`` (only when draft_vocab < V),
                 ``t2d``; config with ``draft_vocab_size``, ``target_hidden_size``,
                 ``eagle_aux_hidden_state_layer_ids`` and ``norm_before_residual: false``.
  eagle3-speculators/  the same EAGLE-3 weights with a speculators-format config whose verifier is
                 ``OUT/target`` (absolute path), so ``vllm.LLM(model=OUT/eagle3-speculators)`` serves it.

Usable as a library (``build_pair(out_dir, ...)`` returns a dict of paths) or as a CLI:
  python scripts/engines/make_tiny_vllm_pair.py OUT [--layers 4] [--vocab 256] [--seed 0]
Needs torch, safetensors and transformers (both the project venv and .venv-vllm have them).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

HIDDEN = 128
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
INTERMEDIATE = 256
RMS_EPS = 1e-6


def _normal(gen: torch.Generator, *shape: int, std: float) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * std


def _linear(gen: torch.Generator, out_f: int, in_f: int) -> torch.Tensor:
    # std 1/sqrt(fan_in): activations keep unit scale, logits get a spread of O(1)
    return _normal(gen, out_f, in_f, std=1.0 / math.sqrt(in_f))


def _norm_w(gen: torch.Generator, n: int) -> torch.Tensor:
    return 1.0 + _normal(gen, n, std=0.1)


def _write(dir_: Path, config: dict, tensors: dict[str, torch.Tensor]) -> None:
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dir_ / "model.safetensors"),
              metadata={"format": "pt"})


def _llama_fields(vocab: int, layers: int, rope_theta: float, max_pos: int) -> dict:
    return {
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "rms_norm_eps": RMS_EPS,
        "rope_theta": rope_theta,
        "max_position_embeddings": max_pos,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }


def fill_weights(model, gen: torch.Generator, successor: float) -> None:
    """Seeded weights for a transformers causal LM, in parameter order: norms near 1, a unit-variance embedding, small
    linears (stacked experts [E, out, in] one expert at a time). With `successor`, attention and MLP / expert outputs
    are scaled by it and the LM head is the embedding rolled by one (see the module docstring)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(_norm_w(gen, p.shape[0]))
            elif "embed_tokens" in name:
                p.copy_(_normal(gen, *p.shape, std=1.0))
            elif p.dim() == 3:
                p.copy_(torch.stack([_linear(gen, *p.shape[1:]) for _ in range(p.shape[0])]))
            else:
                p.copy_(_linear(gen, *p.shape))
            if successor and name.endswith(("o_proj.weight", "down_proj.weight", "experts.down_proj")):
                p.mul_(successor)  # layers only perturb the residual stream
        if successor:
            # logits_j = <E[j-1], h>: greedy continuation mostly t -> t+1 (mod V), perturbed by the layers
            emb = model.model.embed_tokens.weight
            model.lm_head.weight.copy_(torch.roll(emb, 1, dims=0) / math.sqrt(HIDDEN))
    model.eval()


def build_target(out: Path, gen: torch.Generator, *, vocab: int, layers: int,
                 rope_theta: float, max_pos: int, successor: float = 0.0) -> dict[str, torch.Tensor]:
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = _llama_fields(vocab, layers, rope_theta, max_pos)
    fields.pop("torch_dtype")
    config = LlamaConfig(**fields)
    config.architectures = ["LlamaForCausalLM"]
    model = LlamaForCausalLM(config).to(torch.float32)
    fill_weights(model, gen, successor)
    model.save_pretrained(str(out), safe_serialization=True)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _attn_mlp(gen: torch.Generator, prefix: str, qkv_in: int, out_scale: float = 1.0) -> dict[str, torch.Tensor]:
    t = {
        f"{prefix}self_attn.q_proj.weight": _linear(gen, HEADS * HEAD_DIM, qkv_in),
        f"{prefix}self_attn.k_proj.weight": _linear(gen, KV_HEADS * HEAD_DIM, qkv_in),
        f"{prefix}self_attn.v_proj.weight": _linear(gen, KV_HEADS * HEAD_DIM, qkv_in),
        f"{prefix}self_attn.o_proj.weight": _linear(gen, HIDDEN, HEADS * HEAD_DIM),
        f"{prefix}mlp.gate_proj.weight": _linear(gen, INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.up_proj.weight": _linear(gen, INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.down_proj.weight": _linear(gen, HIDDEN, INTERMEDIATE),
        f"{prefix}post_attention_layernorm.weight": _norm_w(gen, HIDDEN),
    }
    t[f"{prefix}self_attn.o_proj.weight"] *= out_scale
    t[f"{prefix}mlp.down_proj.weight"] *= out_scale
    return t


def build_eagle1(out: Path, gen: torch.Generator, target_sd: dict, *, vocab: int,
                 rope_theta: float, max_pos: int, with_embed: bool, successor: float = 0.0) -> None:
    cfg = _llama_fields(vocab, 1, rope_theta, max_pos)
    cfg.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    fc = _linear(gen, HIDDEN, 2 * HIDDEN)
    if successor:
        # f^ ~ E(token): the target's LM head then proposes token+1, like the successor target
        fc = fc * successor
        fc[:, :HIDDEN] += torch.eye(HIDDEN)
    t = {"fc.weight": fc}
    t.update(_attn_mlp(gen, "layers.0.", HIDDEN, out_scale=successor or 1.0))
    if with_embed:
        t["embed_tokens.weight"] = target_sd["model.embed_tokens.weight"].clone()
    _write(out, cfg, t)


def _eagle3_tensors(gen: torch.Generator, *, vocab: int, draft_vocab: int,
                    n_aux: int, prefix: str, target_sd: dict, successor: float = 0.0) -> dict[str, torch.Tensor]:
    fc = _linear(gen, HIDDEN, n_aux * HIDDEN)
    if successor:
        # g ~ highest aux state ~ E(t_i) (+ layer perturbations); lm_head row d = E[target_id(d) - 2]:
        # the first draft position mostly proposes t_i + 2 = the target's next-next token
        fc = fc * successor
        fc[:, (n_aux - 1) * HIDDEN:] += torch.eye(HIDDEN)
    t = {"fc.weight": fc}
    t.update(_attn_mlp(gen, prefix, 2 * HIDDEN, out_scale=successor or 1.0))
    t[f"{prefix}input_layernorm.weight"] = _norm_w(gen, HIDDEN)
    t[f"{prefix}hidden_norm.weight"] = _norm_w(gen, HIDDEN)
    t["norm.weight"] = _norm_w(gen, HIDDEN)
    # released d2t: sorted used target ids, target = draft + d2t[draft]
    used = torch.sort(torch.randperm(vocab, generator=gen)[:draft_vocab]).values
    if successor:
        emb = target_sd["model.embed_tokens.weight"]
        t["lm_head.weight"] = emb[(used - 2) % vocab] / math.sqrt(HIDDEN)
    else:
        t["lm_head.weight"] = _linear(gen, draft_vocab, HIDDEN)
    if draft_vocab < vocab:
        t["d2t"] = (used - torch.arange(draft_vocab)).to(torch.int64)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[used] = True
    t["t2d"] = t2d
    return t


def build_pair(out_dir: str | os.PathLike, *, vocab: int = 256, layers: int = 4,
               aux_layer_ids: list[int] | None = None, draft_vocab: int = 128,
               target_rope_theta: float = 500000.0, draft_rope_theta: float = 10000.0,
               max_pos: int = 512, eagle1_embed: bool = False, eagle3_prefix: str = "layers.0.",
               eagle3_arch: str = "LlamaForCausalLMEagle3", successor: float = 0.0,
               seed: int = 0) -> dict[str, str]:
    """Write target/, eagle1/, eagle3/, eagle3-speculators/ under out_dir; return their paths.

    successor=0: all weights random (acceptance ~0). successor=s in (0, 1]: structured weights that give
    partial acceptance: the target's greedy continuation is mostly t -> t+1 (its layers' output
    projections scaled by s perturb that), the EAGLE-1 head mostly proposes token+1 at every draft
    position, the EAGLE-3 head mostly gets the first draft position right (s=0.3 is a good start).
    """
    out = Path(out_dir).resolve()
    gen = torch.Generator().manual_seed(seed)
    if aux_layer_ids is None:
        aux_layer_ids = [1, layers // 2, layers - 1]
    if sorted(set(aux_layer_ids)) != list(aux_layer_ids) or not all(0 <= i < layers for i in aux_layer_ids):
        raise ValueError(f"aux_layer_ids must be strictly increasing and in [0, {layers}): {aux_layer_ids}")

    target_sd = build_target(out / "target", gen, vocab=vocab, layers=layers,
                             rope_theta=target_rope_theta, max_pos=max_pos, successor=successor)
    build_eagle1(out / "eagle1", gen, target_sd, vocab=vocab, rope_theta=draft_rope_theta,
                 max_pos=max_pos, with_embed=eagle1_embed, successor=successor)

    e3 = _eagle3_tensors(gen, vocab=vocab, draft_vocab=draft_vocab, n_aux=len(aux_layer_ids),
                         prefix=eagle3_prefix, target_sd=target_sd, successor=successor)
    e3_cfg = _llama_fields(vocab, 1, draft_rope_theta, max_pos)
    e3_cfg.update({
        "architectures": [eagle3_arch],
        "model_type": "llama",
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": HIDDEN,
        "eagle_aux_hidden_state_layer_ids": list(aux_layer_ids),
        "norm_before_residual": False,
    })
    _write(out / "eagle3", e3_cfg, e3)

    layer_cfg = _llama_fields(vocab, 1, draft_rope_theta, max_pos)
    layer_cfg.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    spec_cfg = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.1.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": str(out / "target"), "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": layer_cfg,
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": HIDDEN,
        "eagle_aux_hidden_state_layer_ids": list(aux_layer_ids),
        "norm_before_residual": False,
        "torch_dtype": "float32",
    }
    _write(out / "eagle3-speculators", spec_cfg, e3)
    return {
        "target": str(out / "target"),
        "eagle1": str(out / "eagle1"),
        "eagle3": str(out / "eagle3"),
        "eagle3_speculators": str(out / "eagle3-speculators"),
    }


RELEASE_PROMPTS = [[1, 17, 42, 99, 5], [1, 200, 3, 77], [1, 9, 9, 120, 64, 31]]


def build_releases(root: Path, *, successor: float = 1.4, prompts: list[list[int]] | None = None) -> dict[str, Path]:
    """build_pair's target and heads rewritten in the *released* layouts (SafeAILab EAGLE-1 `.bin` with an fc bias
    and `"bias": true`; EAGLE-3 `midlayer.*`), with partial acceptance (successor 1.4), so a broken conversion has
    acceptance to change. Writes pair/, eagle1-release/, eagle3-release/ and prompts.jsonl (token ids) under root."""
    paths = build_pair(root / "pair", successor=successor)
    pair = root / "pair"
    # EAGLE-1 as SafeAILab releases it: fp32 pickle, an fc bias, config "bias": true, 2048 positions.
    e1 = load_file(pair / "eagle1" / "model.safetensors")
    e1["fc.bias"] = torch.randn(e1["fc.weight"].shape[0], generator=torch.Generator().manual_seed(3)) * 0.05
    cfg1 = json.loads((pair / "eagle1" / "config.json").read_text())
    cfg1.update(bias=True, max_position_embeddings=2048)
    (root / "eagle1-release").mkdir()
    torch.save(e1, root / "eagle1-release" / "pytorch_model.bin")
    (root / "eagle1-release" / "config.json").write_text(json.dumps(cfg1))
    # EAGLE-3 as SafeAILab/SpecForge release it: midlayer.*, LlamaForCausalLMEagle3.
    e3 = {k.replace("layers.0.", "midlayer."): v for k, v in load_file(pair / "eagle3" / "model.safetensors").items()}
    cfg3 = json.loads((pair / "eagle3" / "config.json").read_text())
    for key in ("norm_before_residual", "target_hidden_size"):
        cfg3.pop(key, None)
    cfg3["architectures"] = ["LlamaForCausalLMEagle3"]
    (root / "eagle3-release").mkdir()
    save_file(e3, root / "eagle3-release" / "model.safetensors")
    (root / "eagle3-release" / "config.json").write_text(json.dumps(cfg3))
    prompts_file = root / "prompts.jsonl"
    prompts_file.write_text("".join(json.dumps({"id": i, "prompt_ids": ids}) + "\n"
                                    for i, ids in enumerate(prompts or RELEASE_PROMPTS)))
    return {"root": root, "target": Path(paths["target"]), "eagle1": root / "eagle1-release",
            "eagle3": root / "eagle3-release", "prompts": prompts_file}
