"""One DFlash drafting step as tensor functions: the forward vLLM 0.32 runs for `method: dflash`
(model_executor/models/qwen3_dflash.py, v1/spec_decode/dflash.py) and z-lab's dflash/model.py.

- Context: c = hidden_norm(fc(taps)), the taps being the target's layer OUTPUTS the head names (our internal ids
  count inputs: taps/conventions.py translates). Every draft layer takes its context K/V from the same c: k_norm(k_proj
  c) with RoPE at the context positions, v_proj c. The context never passes a layer's input_layernorm or MLP.
- Block: [bonus, mask x k] at the positions right after the context, embedded with the TARGET's embedding (the head
  has none). vLLM's block is 1 + num_speculative_tokens rows whatever the config's block_size (dflash.py
  `num_query_per_req`), so k is the bench's --k; the trained block_size - 1 is what convert's serve command writes.
- Layers: Qwen3 pre-norm blocks over the block rows, attending to [context K/V ; block K/V]: every row sees the whole
  context and the whole block (non-causal: DFlash) or the block rows up to its own (causal: JetSpec).
- Output: the draft's final norm, then the TARGET's LM head at the k mask rows (the bonus row proposes nothing).

Context K/V depend only on their own tap and position, so they are written once per verified position into each
layer's cache (as vLLM's `precompute_and_store_context_kv` does) and a block is one forward over k + 1 rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .layers import Attention, TreeAttention, apply_rope, rms_norm
from .rotary_table import RotaryTable


def context_states(taps: torch.Tensor, fc: torch.Tensor, hidden_norm: torch.Tensor, eps: float) -> torch.Tensor:
    """taps [1, T, n * H] -> c [1, T, H] (vLLM's combine_hidden_states then hidden_norm)."""
    return rms_norm(F.linear(taps, fc), hidden_norm, eps)


def store_context(attention: Attention, c: torch.Tensor, positions: torch.Tensor, end: int,
                  rope: RotaryTable) -> None:
    """One layer's context K/V from c at `positions` (ascending, last = end - 1), into that layer's cache."""
    rows = c.shape[1]
    k = F.linear(c, attention.k, attention.k_bias).view(1, rows, attention.num_kv_heads, attention.head_dim)
    v = F.linear(c, attention.v, attention.v_bias).view(1, rows, attention.num_kv_heads, attention.head_dim)
    if attention.k_norm is not None:
        k = rms_norm(k, attention.k_norm, attention.eps)
    cos, sin = rope(positions, end)
    attention.cache.write(positions, end, apply_rope(k.transpose(1, 2), cos, sin), v.transpose(1, 2))


def block_ids(bonus: torch.Tensor, mask_token_id: int, k: int) -> torch.Tensor:
    """[1, k + 1]: the bonus token (the target's own next token, not yet verified) then k mask tokens."""
    masks = torch.full((k,), mask_token_id, dtype=torch.int64, device=bonus.device)
    return torch.cat([bonus.view(1).to(torch.int64), masks]).view(1, -1)


def block_visibility(start: int, rows: int, causal: bool, device) -> TreeAttention:
    """What each block row (positions start .. start + rows - 1, written to those slots) sees: the whole context
    (slots < start) and every block row, or (causal) the block rows up to its own."""
    end = start + rows
    mask = torch.ones(rows, end, dtype=torch.bool, device=device)
    if causal:
        mask[:, start:] = torch.ones(rows, rows, dtype=torch.bool, device=device).tril()
    return TreeAttention(slots=torch.arange(start, end, device=device), mask=mask,
                         key_positions=torch.arange(end, device=device))


def block_hidden(layers: Sequence, x: torch.Tensor, start: int, rope: RotaryTable, causal: bool,
                 eps: float) -> torch.Tensor:
    """The block's embedded rows x [1, k + 1, H] through the draft layers (objects with input_norm, attention,
    post_norm, mlp: heads.PlainLayer); each layer's cache must hold the context at slots < start."""
    rows = x.shape[1]
    positions = torch.arange(start, start + rows, device=x.device)
    visibility = block_visibility(start, rows, causal, x.device)
    for layer in layers:
        x = x + layer.attention(rms_norm(x, layer.input_norm, eps), positions, start + rows, rope, visibility)
        x = x + layer.mlp(rms_norm(x, layer.post_norm, eps))
    return x


def mask_logits(x: torch.Tensor, norm: torch.Tensor, lm_head: torch.Tensor, eps: float) -> torch.Tensor:
    """[k, V]: the final norm and the target's LM head at the mask rows (row 0, the bonus, proposes nothing)."""
    return F.linear(rms_norm(x[0, 1:], norm, eps), lm_head)
