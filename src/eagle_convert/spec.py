"""The canonical description of an EAGLE draft head, independent of the layout it was stored in.

Every input layout is read into a `DraftSpec` plus tensors under *canonical names*; every output layout and the
bench runner start from that. Canonical tensor names are the EAGLE-1 release names, with EAGLE-3's `midlayer.`
renamed to `layers.0.`:

  fc.weight, fc.bias (EAGLE-1 only, optional)
  layers.0.self_attn.{q,k,v,o}_proj.weight, layers.0.self_attn.{q,k,v}_proj.bias (Qwen2 EAGLE-1 heads)
  layers.0.mlp.{gate,up,down}_proj.weight
  layers.0.post_attention_layernorm.weight
  layers.0.input_layernorm.weight, layers.0.hidden_norm.weight, norm.weight   (EAGLE-3 only)
  embed_tokens.weight   (optional; the target's embedding applies when absent)
  lm_head.weight        (EAGLE-3: the draft's own [draft_vocab, H]; EAGLE-1: the target's, spliced)
  d2t (int64 [draft_vocab], target_id = i + d2t[i]), t2d (bool [V])   (EAGLE-3 only)
"""

from __future__ import annotations

from dataclasses import dataclass, field

EAGLE1 = "eagle1"
EAGLE3 = "eagle3"

# The target tensors a head takes from its model (Hugging Face names): the LM head, and the input embedding, which is
# also the LM head of a target with tied embeddings. Here, not in target.py, so that torch-free code can name them.
TARGET_LM_HEAD = "lm_head.weight"
TARGET_EMBED = "model.embed_tokens.weight"

# The reference implementation and transformers' Llama both use this base when a config has no rope_theta.
DEFAULT_ROPE_THETA = 10000.0


@dataclass(frozen=True)
class DraftSpec:
    kind: str  # EAGLE1 or EAGLE3
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float  # the draft's own base; never the target's
    vocab_size: int  # the target vocabulary
    max_position_embeddings: int
    rope_scaling: dict | None = None  # the draft's own (releases have none); never the target's
    fc_bias: bool = False  # EAGLE-1 only
    qkv_bias: bool = False  # EAGLE-1 Qwen2 heads
    draft_vocab_size: int | None = None  # EAGLE-3 only
    target_hidden_size: int | None = None  # EAGLE-3: fc input is 3 * target_hidden_size
    aux_layer_ids: tuple[int, ...] | None = None  # EAGLE-3: target layers whose *inputs* are the features
    # EAGLE-3: the residual is taken after hidden_norm (vLLM's `norm_before_residual: true`); released heads take it
    # before. Read so that bench runs what an engine would run; convert still refuses it (plan.py).
    norm_before_residual: bool = False
    base_model_type: str = "llama"  # "llama" or "qwen2": which HF family the inner config names
    hidden_act: str = "silu"
    extra: dict = field(default_factory=dict, compare=False)  # other source config keys, kept for output configs

    @property
    def is_eagle3(self) -> bool:
        return self.kind == EAGLE3


def default_aux_layer_ids(num_target_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's default feature layers: inputs of layers 2, L//2 and L-3 (HF hidden_states indices)."""
    return (2, num_target_layers // 2, num_target_layers - 3)
