"""A DFlash head (kinds.py "dflash") in the bench runner: the chain loop (speculate.py) feeds it the target's taps of
every verified position, which it turns into context K/V at once (runner/dflash_block.py), and asks it for a block of
k proposals per round, drafted in one forward and verified as a chain like any head's."""

from __future__ import annotations

import torch

from ..errors import UnsupportedModelError
from ..kinds import DFLASH, register
from ..spec import DraftSpec
from .dflash_block import block_hidden, block_ids, context_states, mask_logits, store_context
from .heads import DraftOutput, HeadModule, PlainLayer
from .layers import GetTensor, as_positions, load_attention, load_mlp
from .model import TargetOutput
from .rotary_table import RotaryTable

# vLLM's Qwen3 DFlash layer when the draft config states no rope_theta (qwen3_dflash.py: getattr(config,
# "rope_theta", 1000000)); the EAGLE heads' default (10000) would run such a head with the wrong positions.
VLLM_DFLASH_ROPE_THETA = 1_000_000.0


class DflashHead(HeadModule):
    """Qwen3 pre-norm layers (`layers.{i}.*`, q/k norms), `fc` over the tapped states, `hidden_norm`, `norm`; the
    target's embedding and LM head. `forward(from_target=True)` stores context; `draft_block` drafts."""

    drafts_block = True

    def __init__(self, spec: DraftSpec, get_tensor: GetTensor, *, target_embedding: torch.Tensor,
                 target_lm_head: torch.Tensor, dtype=torch.float32, device="cpu"):
        super().__init__(spec, get_tensor, target_embedding, dtype, device)
        get = self._get
        self.fc, self.hidden_norm, self.norm = get("fc.weight"), get("hidden_norm.weight"), get("norm.weight")
        first = PlainLayer(get("layers.0.input_layernorm.weight"), self.attention, self.post_norm, self.mlp)
        self.layers = [first] + [self._layer(i) for i in range(1, spec.num_layers)]
        self.extra_layers = self.layers[1:]  # HeadModule.reserve reaches their caches
        self.lm_head = target_lm_head.to(device=self.device, dtype=dtype)
        if not any(key in spec.extra for key in ("rope_theta", "rope_parameters", "rope_scaling")):
            self.rope = RotaryTable(spec.head_dim, VLLM_DFLASH_ROPE_THETA, None, dtype, self.device)

    def _layer(self, index: int) -> PlainLayer:
        spec, p = self.spec, f"layers.{index}."
        attention = load_attention(self._get, p, num_heads=spec.num_attention_heads,
                                   num_kv_heads=spec.num_key_value_heads, head_dim=spec.head_dim, dtype=self.dtype,
                                   device=self.device, qk_norm=spec.qk_norm, eps=spec.rms_norm_eps,
                                   sliding_window=self.sliding_windows[index])
        return PlainLayer(self._get(p + "input_layernorm.weight"), attention,
                          self._get(p + "post_attention_layernorm.weight"), load_mlp(self._get, p))

    @classmethod
    def target_taps(cls, spec: DraftSpec, num_target_layers: int) -> tuple[int, ...]:
        """The target layer inputs the head reads (internal ids; the head's own count layer outputs, translated when
        it was read: draft/dflash_head.py). num_target_layers itself is the last layer's output, before the final
        norm, as vLLM captures it."""
        return tuple(spec.aux_layer_ids)

    @classmethod
    def check_tree(cls, label: str) -> None:
        raise UnsupportedModelError(
            f"{label} is a DFlash head: it drafts one block of mask tokens per forward, which the engines verify as "
            "a chain; it has no tree of candidates to draft.", "Bench it with --tree chain (the default).")

    def target_feature(self, out: TargetOutput) -> torch.Tensor:
        if out.aux is None:
            raise ValueError("DFlash needs the target's tapped states: build TargetModel with aux_layer_ids")
        return out.aux

    @torch.inference_mode()
    def forward(self, token_ids, features, positions, *, from_target: bool, last_logits_only=False,
                tree_attention=None) -> DraftOutput:
        """Store the context K/V of the target's taps at `positions` in every layer; the tokens are not read (the
        block starts from the bonus the loop holds). Nothing is drafted here: logits are empty."""
        if not from_target or tree_attention is not None:
            raise ValueError("a DFlash head takes only target taps, in order (no fed-back rows, no trees)")
        positions, end = as_positions(positions, self.device)
        c = context_states(features.to(self.dtype), self.fc, self.hidden_norm, self.spec.rms_norm_eps)
        for layer in self.layers:
            store_context(layer.attention, c, positions, end, self.rope)
        return DraftOutput(logits=c.new_zeros(1, 0, self.lm_head.shape[0]), hidden=c, fc_out=None)

    @torch.inference_mode()
    def draft_block(self, bonus: torch.Tensor, start: int, k: int) -> torch.Tensor:
        """Logits [k, V] at the k mask positions after `bonus` (at position `start`; the context must hold
        positions 0 .. start - 1)."""
        x = torch.nn.functional.embedding(block_ids(bonus.to(self.device), self.spec.mask_token_id, k),
                                          self.embed_weight)
        x = block_hidden(self.layers, x, start, self.rope, self.spec.causal, self.spec.rms_norm_eps)
        return mask_logits(x, self.norm, self.lm_head, self.spec.rms_norm_eps)


register(DFLASH, runner_head=DflashHead)
