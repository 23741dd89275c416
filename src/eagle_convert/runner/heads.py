"""EAGLE-1 and EAGLE-3 draft heads, built from a `DraftSpec` and tensors under canonical names (see
`eagle_convert.spec`). Each head owns one decoder layer with its own per-position KV cache and plain RoPE at
`spec.rope_theta` (scaled only by the draft's own `spec.rope_scaling`, which releases do not have): the head was
trained with that RoPE, never with the target's theta or llama3 scaling.

Row i of a head's input pairs the feature at position i with the token at position i+1, at RoPE position i.
`forward(..., from_target=True)` takes target features; `from_target=False` takes the head's own `hidden` from the
previous chain step (EAGLE-1: the predicted feature, run through fc again; EAGLE-3: the pre-norm output, fc skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import MissingTensorError, ShapeMismatchError, UnsupportedModelError
from ..kinds import EAGLE1, EAGLE3, check_takes_token_map, register
from ..spec import DraftSpec, default_aux_layer_ids
from .hot_tokens import restrict_lm_head
from .layers import (
    GetTensor,
    TreeAttention,
    as_positions,
    cast_reader,
    load_attention,
    load_mlp,
    owned_copy,
    rms_norm,
)
from .masks import ForwardMasks
from .model import TargetOutput, draft_sliding_windows, rope_from_hf
from .rotary_table import RotaryTable


@dataclass
class DraftOutput:
    logits: torch.Tensor  # [1, T, head vocab]: EAGLE-1 the target vocab, EAGLE-3 the draft vocab
    hidden: torch.Tensor  # [1, T, H]: what the next chain step feeds back
    fc_out: torch.Tensor | None  # [1, T, H]; None where fc was skipped


def head_rope(spec: DraftSpec) -> tuple[float, dict | None]:
    """The head's own RoPE: spec.rope_theta, scaled only by the draft's own rope_scaling (releases have none)."""
    return rope_from_hf({"rope_theta": spec.rope_theta, "rope_scaling": spec.rope_scaling,
                         "max_position_embeddings": spec.max_position_embeddings})


def _optional(get: GetTensor, name: str) -> torch.Tensor | None:
    try:
        return get(name)
    except KeyError:  # MissingTensorError is a KeyError too
        return None


class HeadModule:
    """What the speculation loop needs from any head: the torch module of a checkpoint's head (draft/load.py's
    DraftHead), one class per kind (kinds.py `runner_head`)."""

    spec: DraftSpec
    # [head vocab] -> target id of each head token; None where head ids already are target ids (EAGLE-1).
    draft_to_target: torch.Tensor | None = None
    # Drafts its k proposals in one forward (`draft_block`: DFlash) instead of k chained steps
    drafts_block = False

    def __init__(self, spec: DraftSpec, get_tensor: GetTensor, target_embedding: torch.Tensor, dtype, device):
        self.spec = spec
        self.dtype, self.device = dtype, torch.device(device)
        self._get = get = cast_reader(get_tensor, dtype, self.device)
        # The draft's own copy when it ships one (converted layouts may differ from the target by design),
        # else the target's.
        own = _optional(get, "embed_tokens.weight")
        self.embed_weight = own if own is not None else target_embedding.to(device=self.device, dtype=dtype)
        if self.embed_weight.shape != (spec.vocab_size, spec.hidden_size):
            raise ShapeMismatchError(
                f"Draft embedding has shape {tuple(self.embed_weight.shape)}, expected "
                f"[{spec.vocab_size}, {spec.hidden_size}] (vocab, hidden).",
                "Check that the draft head was trained for this target.")
        self.rope = RotaryTable(spec.head_dim, *head_rope(spec), dtype, self.device)
        # the draft's own sliding window per layer (its config, kept whole in spec.extra); None = full attention
        self.sliding_windows = draft_sliding_windows(spec.extra, spec.num_layers)
        self.attention = load_attention(
            get, "layers.0.", num_heads=spec.num_attention_heads, num_kv_heads=spec.num_key_value_heads,
            head_dim=spec.head_dim, dtype=dtype, device=self.device, qkv_bias=spec.qkv_bias, qk_norm=spec.qk_norm,
            eps=spec.rms_norm_eps, sliding_window=self.sliding_windows[0])
        self.post_norm = get("layers.0.post_attention_layernorm.weight")
        self.mlp = load_mlp(get, "layers.0.")

    @classmethod
    def check_runs(cls, spec: DraftSpec, label: str) -> None:
        """Refuse, before any target loads, a head of this kind the runner cannot run (MtpHead: its family)."""

    @classmethod
    def check_tree(cls, label: str) -> None:
        """Refuse, before any target loads, draft trees for a kind that drafts none (DFlash)."""

    @classmethod
    def target_taps(cls, spec: DraftSpec, num_target_layers: int) -> tuple[int, ...]:
        """The target layers whose inputs the head reads: none for EAGLE-1; the spec's ids or (2, L//2, L-3) for
        EAGLE-3."""
        if not spec.head_kind.aux_states or not spec.use_aux_hidden_state:
            return ()
        ids = tuple(spec.aux_layer_ids) if spec.aux_layer_ids else default_aux_layer_ids(num_target_layers)
        if any(not 0 <= i < num_target_layers for i in ids) or len(set(ids)) < len(ids):
            raise _aux_ids_error(ids, num_target_layers)
        return ids

    def reserve(self, positions: int) -> None:
        """Every layer's cache allocated for `positions` now (see KVCache.reserve)."""
        self.attention.cache.reserve(positions)
        for layer in getattr(self, "extra_layers", ()):
            layer.attention.cache.reserve(positions)

    def target_feature(self, out: TargetOutput) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, token_ids: torch.Tensor, features: torch.Tensor, positions: torch.Tensor | Sequence[int], *,
                from_target: bool, last_logits_only: bool = False,
                tree_attention: TreeAttention | None = None) -> DraftOutput:
        """token_ids [1, T] (target ids), features [1, T, F] at ascending contiguous positions. Drafting needs only
        the last row's logits: `last_logits_only` skips the LM head on the others (a V x H product per row).
        `tree_attention`: tree rows instead (repeated positions, own slots and mask; see runner/tree_draft.py)."""
        raise NotImplementedError

    def __call__(self, *args, **kwargs) -> DraftOutput:
        return self.forward(*args, **kwargs)

    def to_target_ids(self, head_ids: torch.Tensor) -> torch.Tensor:
        return head_ids if self.draft_to_target is None else self.draft_to_target[head_ids]


class Eagle1Head(HeadModule):
    """x = fc([E(t) ; f]) (+b); y = x + Attn(x) (no input norm); f^ = y + MLP(RMS_post(y));
    logits = target_lm_head(f^). With `hot_token_ids` (a hot-token map, runner/hot_tokens.py) the LM head keeps only
    those rows, sliced here once, and head id i is target id hot_token_ids[i]."""

    def __init__(self, spec: DraftSpec, get_tensor: GetTensor, *, target_embedding: torch.Tensor,
                 target_lm_head: torch.Tensor, dtype=torch.float32, device="cpu",
                 hot_token_ids: torch.Tensor | None = None):
        super().__init__(spec, get_tensor, target_embedding, dtype, device)
        self.fc = self._get("fc.weight")
        self.fc_bias = self._get("fc.bias") if spec.fc_bias else None
        # The LM head an engine would use: a converted layout's spliced `lm_head.weight` (vllm-v0) when present, so a
        # wrong splice shows up as lost acceptance; otherwise the target's, as the EAGLE reference does.
        own = _optional(self._get, "lm_head.weight")
        self.lm_head = own if own is not None else target_lm_head.to(device=self.device, dtype=dtype)
        if hot_token_ids is not None:
            self.lm_head, self.draft_to_target = restrict_lm_head(self.lm_head, hot_token_ids)

    def target_feature(self, out: TargetOutput) -> torch.Tensor:
        return out.hidden

    @torch.inference_mode()
    def forward(self, token_ids, features, positions, *, from_target: bool, last_logits_only=False,
                tree_attention=None) -> DraftOutput:
        positions, end = as_positions(positions, self.device)
        embedded = F.embedding(token_ids.to(self.device), self.embed_weight)
        x = F.linear(torch.cat([embedded, features.to(self.dtype)], dim=-1), self.fc, self.fc_bias)
        y = x + self.attention(x, positions, end, self.rope, ForwardMasks.build(positions, end, tree_attention))
        predicted = y + self.mlp(rms_norm(y, self.post_norm, self.spec.rms_norm_eps))
        logits = F.linear(predicted[:, -1:] if last_logits_only else predicted, self.lm_head)
        return DraftOutput(logits=logits, hidden=predicted, fc_out=x)


@dataclass
class PlainLayer:
    """A decoder layer after the first (multi-layer EAGLE-3 heads): pre-norm over the hidden state alone, its residual
    the running sum, as vLLM's llama_eagle3 chains them (input_layernorm(h, residual) adds, then normalises)."""

    input_norm: torch.Tensor
    attention: object
    post_norm: torch.Tensor
    mlp: object


class Eagle3Head(HeadModule):
    """g = fc(C(f)) for target features f of n aux states (skipped for fed-back rows, and for use_aux_hidden_state
    false, where f is the target's last hidden state), C = RMS_input_norm over the concatenation (norm_before_fc) and/or
    one RMS per aux state (fc_norm); u = g + Attn([RMS_in(E(t)) ; RMS_hidden(g)]) (RMS_hidden(g) + Attn(...) with
    norm_before_residual, as vLLM's llama_eagle3 does); h = MLP(RMS_post(u)), residual r = u; each further layer:
    r = h + r, r = r + Attn(RMS_in(r)), h = MLP(RMS_post(r)); o = h + r; logits = lm_head(RMS_norm(o)) over the draft
    vocab; fed back: o, or RMS_norm(o) with norm_output; token = argmax + d2t[argmax]. Qwen3 drafts normalise q and k
    per head before RoPE (q_norm / k_norm)."""

    def __init__(self, spec: DraftSpec, get_tensor: GetTensor, *, target_embedding: torch.Tensor,
                 target_lm_head: torch.Tensor | None = None, dtype=torch.float32, device="cpu"):
        super().__init__(spec, get_tensor, target_embedding, dtype, device)
        get = self._get
        self.fc = get("fc.weight") if spec.use_aux_hidden_state else None
        self.fc_bias = get("fc.bias") if spec.fc_bias else None
        self.fc_input_norm = get("input_norm.weight") if spec.norm_before_fc else None
        self.fc_norms = [get(f"fc_norm.{i}.weight") for i in range(spec.num_aux_states)] if spec.fc_norm else []
        self.input_norm = get("layers.0.input_layernorm.weight")
        self.hidden_norm = get("layers.0.hidden_norm.weight")
        self.extra_layers = [self._plain_layer(get, i) for i in range(1, spec.num_layers)]
        self.norm = get("norm.weight")
        own = _optional(get, "lm_head.weight")  # the draft's own, over the draft vocab
        if own is None and target_lm_head is None:
            raise MissingTensorError("EAGLE-3 head without lm_head.weight and no target LM head given.",
                                     "Pass the target's LM head (draft_vocab_size null heads use it).")
        self.lm_head = own if own is not None else target_lm_head.to(device=self.device, dtype=dtype)
        draft_vocab = self.lm_head.shape[0]
        d2t = _optional(get_tensor, "d2t")
        if d2t is None and draft_vocab != spec.vocab_size:
            raise MissingTensorError(
                f"EAGLE-3 head has a draft vocab of {draft_vocab} < {spec.vocab_size} but no `d2t` tensor.",
                "Without d2t the draft's tokens cannot be mapped to target ids; re-export the head with d2t.")
        ids = torch.arange(draft_vocab, device=self.device)
        self.draft_to_target = ids if d2t is None else ids + owned_copy(d2t, torch.int64, self.device)
        if int(self.draft_to_target.min()) < 0 or int(self.draft_to_target.max()) >= spec.vocab_size:
            raise ShapeMismatchError(f"d2t maps draft ids outside the target vocab [0, {spec.vocab_size}).",
                                     "The d2t tensor does not belong to this target's vocabulary.")

    def _plain_layer(self, get: GetTensor, index: int) -> PlainLayer:
        spec, p = self.spec, f"layers.{index}."
        attention = load_attention(get, p, num_heads=spec.num_attention_heads, num_kv_heads=spec.num_key_value_heads,
                                   head_dim=spec.head_dim, dtype=self.dtype, device=self.device, qk_norm=spec.qk_norm,
                                   eps=spec.rms_norm_eps, sliding_window=self.sliding_windows[index])
        return PlainLayer(get(p + "input_layernorm.weight"), attention, get(p + "post_attention_layernorm.weight"),
                          load_mlp(get, p))

    def target_feature(self, out: TargetOutput) -> torch.Tensor:
        if not self.spec.use_aux_hidden_state:
            return out.hidden  # use_aux_hidden_state false: the target's last hidden state, as for EAGLE-1
        if out.aux is None:
            raise ValueError("EAGLE-3 needs the target's aux hidden states: build TargetModel with aux_layer_ids")
        return out.aux

    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """The aux states through the variant's norms and fc (vLLM's combine_hidden_states)."""
        eps = self.spec.rms_norm_eps
        if self.fc_input_norm is not None:
            features = rms_norm(features, self.fc_input_norm, eps)
        if self.fc_norms:
            chunks = features.chunk(len(self.fc_norms), dim=-1)
            features = torch.cat([rms_norm(c, w, eps) for c, w in zip(chunks, self.fc_norms)], dim=-1)
        return F.linear(features, self.fc, self.fc_bias)

    @torch.inference_mode()
    def forward(self, token_ids, features, positions, *, from_target: bool, last_logits_only=False,
                tree_attention=None) -> DraftOutput:
        positions, end = as_positions(positions, self.device)
        eps = self.spec.rms_norm_eps
        features = features.to(self.dtype)
        fc_applied = from_target and self.fc is not None
        g = self.combine(features) if fc_applied else features
        embedded = F.embedding(token_ids.to(self.device), self.embed_weight)
        g_normed = rms_norm(g, self.hidden_norm, eps)
        residual = g_normed if self.spec.norm_before_residual else g
        attn_in = torch.cat([rms_norm(embedded, self.input_norm, eps), g_normed], dim=-1)
        masks = ForwardMasks.build(positions, end, tree_attention)  # one set for every layer
        residual = residual + self.attention(attn_in, positions, end, self.rope, masks)
        h = self.mlp(rms_norm(residual, self.post_norm, eps))
        for layer in self.extra_layers:
            residual = h + residual
            residual = residual + layer.attention(rms_norm(residual, layer.input_norm, eps), positions, end, self.rope,
                                                  masks)
            h = layer.mlp(rms_norm(residual, layer.post_norm, eps))
        o = h + residual
        if self.spec.norm_output:
            normed = rms_norm(o, self.norm, eps)
            fed_back, to_logits = normed, (normed[:, -1:] if last_logits_only else normed)
        else:
            fed_back, to_logits = o, rms_norm(o[:, -1:] if last_logits_only else o, self.norm, eps)
        logits = F.linear(to_logits, self.lm_head)
        return DraftOutput(logits=logits, hidden=fed_back, fc_out=g if fc_applied else None)


def build_draft_head(spec: DraftSpec, get_tensor: GetTensor, *, target_embedding: torch.Tensor,
                     target_lm_head: torch.Tensor, dtype=torch.float32, device="cpu",
                     hot_token_ids: torch.Tensor | None = None) -> HeadModule:
    """`get_tensor` reads canonical names and must raise KeyError for a tensor the checkpoint lacks.
    `hot_token_ids`: a hot-token map (runner/hot_tokens.py), for kinds that draft with the target's LM head."""
    head_class = head_module_class(spec)
    if hot_token_ids is None:
        return head_class(spec, get_tensor, target_embedding=target_embedding, target_lm_head=target_lm_head,
                          dtype=dtype, device=device)
    check_takes_token_map(spec.head_kind)
    return head_class(spec, get_tensor, target_embedding=target_embedding, target_lm_head=target_lm_head,
                      dtype=dtype, device=device, hot_token_ids=hot_token_ids)


def head_module_class(spec: DraftSpec) -> type[HeadModule]:
    """The runner's head module for the spec's kind, as its row in kinds.py holds it."""
    import eagle_convert.runner.dflash_drafter  # noqa: F401  (registers DflashHead; it imports this module)
    import eagle_convert.runner.mtp_head  # noqa: F401  (registers MtpHead into MTP's row; it imports this module)

    if spec.head_kind.runner_refusal:  # a kind our runner cannot draft yet: refused by name, before the target loads
        raise UnsupportedModelError(f"This is a {spec.variant} head: {spec.head_kind.runner_refusal}.",
                                    "Bench it in an engine that runs it (--engine vllm), or convert it and serve it "
                                    "with the command convert prints.")
    return spec.head_kind.head_class()


register(EAGLE1, runner_head=Eagle1Head)
register(EAGLE3, runner_head=Eagle3Head)


def aux_layer_ids_for(spec: DraftSpec, num_target_layers: int) -> tuple[int, ...]:
    """The target layers whose inputs the head reads, as its kind's head module says (HeadModule.target_taps)."""
    return head_module_class(spec).target_taps(spec, num_target_layers)


def _aux_ids_error(ids: tuple[int, ...], num_target_layers: int) -> ShapeMismatchError:
    """Ids the target cannot serve, said as the user can act on them: the loader fills EAGLE-3's default in when the
    config names no layers, so ids equal to the default for this target are named as the default, not as written."""
    where = ("the layers its config names (eagle_aux_hidden_state_layer_ids)"
             if ids != default_aux_layer_ids(num_target_layers) else
             f"EAGLE-3's default layers (2, L//2, L-3), used when the head's config names none, which for L = "
             f"{num_target_layers} are")
    return ShapeMismatchError(
        f"The EAGLE-3 head reads the target's hidden states at {where} {list(ids)}, but the target has "
        f"{num_target_layers} layer(s): each id must be a distinct layer in [0, {num_target_layers}).",
        "Bench the head on the target it was trained for, or set eagle_aux_hidden_state_layer_ids in the head's "
        "config.json to the distinct target layers it was trained on (EAGLE-3's default needs 3 or at least 7 layers).")
