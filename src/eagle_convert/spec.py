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

from .kinds import KINDS, HeadKind

# The target tensors a head takes from its model (Hugging Face names): the LM head, and the input embedding, which is
# also the LM head of a target with tied embeddings. Here, not in target.py, so that torch-free code can name them.
TARGET_LM_HEAD = "lm_head.weight"
TARGET_EMBED = "model.embed_tokens.weight"

# What convert may do with an EAGLE-1 fc bias a layout cannot express (`--fc-bias`): refuse, drop it, or fold it
# exactly into a draft-specific embedding (conversion/plan.py).
FC_BIAS_MODES = ("error", "drop", "fold")


@dataclass(frozen=True)
class DraftSpec:
    kind: str  # EAGLE1, EAGLE3 or MTP: a key of kinds.KINDS
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
    fc_bias: bool = False  # EAGLE-1 (SafeAILab releases); EAGLE-3 heads with one are refused by every layout
    qkv_bias: bool = False  # EAGLE-1 Qwen2 heads
    draft_vocab_size: int | None = None  # EAGLE-3 only
    target_hidden_size: int | None = None  # EAGLE-3: fc input is 3 * target_hidden_size
    aux_layer_ids: tuple[int, ...] | None = None  # EAGLE-3: target layers whose *inputs* are the features
    # Where aux_layer_ids came from: the name of the taps/conventions.py row it was read from, or "default" (absent:
    # the EAGLE reference default filled in), "absent" (absent, no target to fill it from), "none" (no aux states).
    # An empty list stated in a config keeps that row's name: it is not "absent".
    aux_ids_origin: str | None = field(default=None, compare=False)
    # EAGLE-3: the residual is taken after hidden_norm (vLLM's `norm_before_residual: true`); released heads take it
    # before. Read so that bench runs what an engine would run; convert still refuses it (plan.py).
    norm_before_residual: bool = False
    # EAGLE-3 variants, detected from the tensors (variants.py) and reconciled with the config:
    num_aux_states: int = 3  # fc input = num_aux_states x target_hidden_size; 0: use_aux_hidden_state false (fed the
    # target's last hidden state, like EAGLE-1, with no fc)
    norm_before_fc: bool = False  # one RMSNorm over the concatenated aux states (`input_norm.weight`)
    fc_norm: bool = False  # "EAGLE 3.1": one RMSNorm per aux state (`fc_norm.{i}.weight`)
    norm_output: bool = False  # "EAGLE 3.1": the fed-back hidden state is taken after the final norm
    num_layers: int = 1  # decoder layers; layers after the first are plain pre-norm layers over the hidden state
    qk_norm: bool = False  # Qwen3-architecture draft: per-head q_norm / k_norm before RoPE
    lm_head_from_target: bool = False  # EAGLE-3 with draft_vocab_size null and no lm_head: the target's LM head
    base_model_type: str = "llama"  # "llama" or "qwen2": which HF family the inner config names
    # MTP heads (kinds.py "mtp"): the family (mtp/ table) and its fusion order, [hidden ; embedding] for MiMo
    mtp_family: str | None = None
    mtp_hidden_first: bool = False
    # DFlash heads (kinds.py "dflash"): the block drafted per forward (bonus + block_size - 1 mask tokens), the mask
    # token (a target id), attention inside the block (JetSpec: causal), and the target's layer count when known
    block_size: int | None = None
    mask_token_id: int | None = None
    causal: bool = False
    num_target_layers: int | None = None
    hidden_act: str = "silu"
    extra: dict = field(default_factory=dict, compare=False)  # other source config keys, kept for output configs
    flag_sources: dict = field(default_factory=dict, compare=False)  # EAGLE-3 flag -> where it was read from

    @property
    def head_kind(self) -> HeadKind:
        """What this kind of head is (kinds.py): asked instead of comparing kind names."""
        return KINDS[self.kind]

    @property
    def is_eagle3(self) -> bool:
        return self.head_kind.aux_states  # EAGLE-3: the kind fed target aux states, with variant flags

    @property
    def use_aux_hidden_state(self) -> bool:
        return self.num_aux_states > 0

    @property
    def variant(self) -> str:
        """A name for the head: EAGLE-1, EAGLE-3, or EAGLE-3 / EAGLE 3.1 with its non-default flags."""
        if self.block_size is not None:  # a block drafter (DFlash): its block is what engines must run alike
            return (f"{self.head_kind.title} (block {self.block_size}, mask token {self.mask_token_id}, "
                    f"{'causal (JetSpec)' if self.causal else 'non-causal'} attention in the block)")
        if not self.head_kind.aux_states:  # EAGLE-3's variants are told apart by flags; other kinds have none
            return self.head_kind.title
        base = "EAGLE 3.1" if self.fc_norm or self.norm_output else "EAGLE-3"
        flags = [name for name, on in (
            ("norm_before_fc", self.norm_before_fc), ("fc_norm", self.fc_norm), ("norm_output", self.norm_output),
            ("norm_before_residual", self.norm_before_residual),
            ("use_aux_hidden_state=false", not self.use_aux_hidden_state),
            (f"{self.num_aux_states} aux states", self.use_aux_hidden_state and self.num_aux_states != 3),
            (f"{self.num_layers} layers", self.num_layers > 1), ("Qwen3 attention (q_norm/k_norm)", self.qk_norm),
            ("target's LM head", self.lm_head_from_target), ("fc bias", self.fc_bias),
            (f"target hidden {self.target_hidden_size} != hidden {self.hidden_size}",
             self.target_hidden_size is not None and self.target_hidden_size != self.hidden_size)) if on]
        return base + (f" ({', '.join(flags)})" if flags else "")


def default_aux_layer_ids(num_target_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's default feature layers: inputs of layers 2, L//2 and L-3 (HF hidden_states indices)."""
    return (2, num_target_layers // 2, num_target_layers - 3)
