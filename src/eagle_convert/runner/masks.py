"""Which keys each query row of one forward sees, and attention over them, without a mask wherever causality alone
says it, so that SDPA may pick its flash or memory-efficient kernels (a boolean mask rules flash out, and with
grouped heads the memory-efficient kernel too, leaving the math path, whose memory grows with queries x keys).

One `ForwardMasks` is built per forward and shared by every layer; a mask is built at most once per distinct
sliding window. The three cases:
- one-token decode (no window cutting in): no mask, the row sees every cached key;
- rows from position 0 (the first prefill chunk): `is_causal`;
- anything else (a prefill chunk at an offset, a verify pass, a tree, a window that cuts): a boolean mask
  [T, end], with the query-head group folded into the query length so that keys and values are never repeated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # layers.py imports this module
    from .layers import TreeAttention

NO_MASK, CAUSAL = "none", "causal"


@dataclass
class ForwardMasks:
    positions: torch.Tensor  # [T] the rows' RoPE positions
    end: int  # keys at slots < end are in use
    tree: TreeAttention | None = None
    _built: dict = field(default_factory=dict)

    @classmethod
    def build(cls, positions: torch.Tensor, end: int, tree: TreeAttention | None = None) -> ForwardMasks:
        return cls(positions, tree.end if tree is not None else end, tree)

    def mask(self, window: int | None, group: int = 1) -> torch.Tensor | str:
        """NO_MASK, CAUSAL, or the boolean mask for layers with this sliding window (None: full): [T, end], repeated
        `group` times along the rows for queries folded by head group (see attend)."""
        rows = len(self.positions)
        if self.tree is None and (window is None or self.end <= window):  # no key lies outside any row's window
            if rows == 1:
                return NO_MASK
            if rows == self.end:
                return CAUSAL
        if (window, group) not in self._built:
            self._built[window, group] = (self._boolean(window) if group == 1
                                          else self.mask(window).repeat(group, 1))
        return self._built[window, group]

    def _boolean(self, window: int | None) -> torch.Tensor:
        if self.tree is not None:
            key_positions, mask = self.tree.key_positions, self.tree.mask
        else:
            key_positions = torch.arange(self.end, device=self.positions.device)
            mask = key_positions[None, :] <= self.positions[:, None]
        if window is not None:  # never in place: a tree's mask belongs to the tree
            mask = mask & (key_positions[None, :] > self.positions[:, None] - window)
        return mask


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | str) -> torch.Tensor:
    """q [1, H, T, d], keys/values [1, KV, end, d] (H a multiple of KV, query head h served by kv head h // G) ->
    [1, H, T, d]. A boolean mask comes already folded: [G * T, end] (ForwardMasks.mask(window, G))."""
    _, heads, rows, dim = q.shape
    group = heads // keys.shape[1]
    if isinstance(mask, str) and mask == CAUSAL:
        if group > 1:  # is_causal needs one key head per query head: the rows from 0 are few enough to repeat
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True)
    folded = q.reshape(1, keys.shape[1], group * rows, dim)  # row g*T + t = head (kv, g), query t
    if isinstance(mask, str):
        out = F.scaled_dot_product_attention(folded, keys, values)
    else:
        out = F.scaled_dot_product_attention(folded, keys, values, attn_mask=mask)
    return out.reshape(1, heads, rows, dim)
