"""Read a draft checkpoint of any kind into a `DraftHead`: a `DraftSpec` plus canonical tensor names (reads headers
only). `open_head` is the one door: it asks the kinds table which kind the checkpoint holds and that kind's reader
reads it (here `load_draft` for the kinds a draft layout holds; mtp/draft.py registers MTP's)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..checkpoint.index import Checkpoint, TensorRef
from ..errors import LayoutError, ShapeMismatchError, UnexpectedTensorError, option
from ..families import refuse_family
from ..kinds import EAGLE1, EAGLE3, KINDS, HeadKind, kind_of, register
from ..layouts import CANONICAL_NAMES, Layout, detect_layout
from ..layouts.base import matches_any
from ..layouts.modelopt import modelopt_refusal
from ..rope.types import DEFAULT_ROPE_THETA
from ..spec import DraftSpec
from .variants import detect_eagle3, mla_refusal


@dataclass(frozen=True)
class DraftHead:
    checkpoint: Checkpoint
    layout: Layout | None  # the draft layout it is stored in; None for a kind no layout holds (MTP: mtp/draft.py)
    layout_reason: str
    spec: DraftSpec
    tensors: dict[str, TensorRef]  # canonical name -> where it is stored
    dropped: tuple[tuple[str, str], ...]  # (source name, why) for tensors the user dropped
    notes: tuple[str, ...]  # what we corrected or inferred, shown to the user

    @property
    def layout_name(self) -> str:
        return self.layout.name


def kind_of_checkpoint(ckpt: Checkpoint) -> HeadKind:
    """The kind of head `ckpt` holds (kinds.kind_of on its config and tensor names)."""
    return KINDS[kind_of(ckpt.config, frozenset(ckpt.names()))]


def open_head(ckpt: Checkpoint, target_config: dict | None, *, label: str | None = None,
              drop: tuple[str, ...] = ()) -> DraftHead:
    """Any draft head, read by its kind's reader (`label`: how the user named it, for messages)."""
    return kind_of_checkpoint(ckpt).read(ckpt, target_config, label=label, drop=tuple(drop))


def read_rope(config: dict) -> tuple[float, dict | None, bool]:
    """(theta, scaling, was_explicit) from `rope_theta`/`rope_scaling` or transformers 5's `rope_parameters`."""
    params = config.get("rope_parameters") or {}
    theta = config.get("rope_theta", params.get("rope_theta"))
    scaling = config.get("rope_scaling")
    if scaling is None and params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    return (float(theta) if theta is not None else DEFAULT_ROPE_THETA), scaling, theta is not None


def _require(config: dict, key: str, where: str):
    if key not in config:
        raise LayoutError(f"The draft config ({where}) has no {key!r}.",
                          "Add it to config.json (copy it from the model the head was trained for).")
    return config[key]


def load_draft(ckpt: Checkpoint, target_config: dict | None = None, drop: tuple[str, ...] = ()) -> DraftHead:
    names = frozenset(ckpt.names())
    refuse_family(ckpt.config, names, ckpt.label)  # first: a family on another's body (DSpark on DFlash) is named
    layout, reason = detect_layout(ckpt.config, names)
    if layout is None:
        sample = ", ".join(sorted(names)[:8])
        raise LayoutError(
            f"{ckpt.label} is not in a draft layout we recognise: "
            f"found tensors {sample}{' ...' if len(names) > 8 else ''} "
            f"and architectures {ckpt.config.get('architectures')}.",
            "eagle-convert reads EAGLE-1/2 and EAGLE-3 heads (SafeAILab, SpecForge, ModelOpt, speculators, vLLM and "
            "SGLang layouts); run `eagle-convert inspect` on it, "
            "and check that DRAFT is the draft head, not the target.")
    layout.check_input(ckpt.config, ckpt.label)
    flat = layout.flat_config(ckpt.config)
    kind = kind_of(ckpt.config, names, from_draft_checkpoint=True)
    notes: list[str] = list(layout.input_notes(ckpt.config))
    mla_refusal(names, ckpt.label)
    modelopt_refusal(ckpt.config, ckpt.label)  # before the tensor mapping: parallel draft heads are refused by name

    # Map every source tensor to a canonical name, or drop it because the user said so. Strict: nothing else.
    allowed = CANONICAL_NAMES[kind]
    tensors: dict[str, TensorRef] = {}
    dropped: list[tuple[str, str]] = []
    unexpected = []
    for name in sorted(names):
        pattern = matches_any(name, drop)
        if pattern:
            dropped.append((name, f"dropped by --drop {pattern!r}"))
            continue
        canonical = layout.source_to_canonical(name)
        if canonical not in allowed:
            unexpected.append(name)
            continue
        tensors[canonical] = ckpt.ref(name)
    if unexpected:
        raise UnexpectedTensorError(
            f"{ckpt.label} ({kind.upper()} head, {layout.name} layout) has tensors no rule maps: "
            f"{', '.join(unexpected)}.",
            f"If they are not part of the head, drop them explicitly with "
            f"{option('drop', 'PATTERN', python='drop=[PATTERN]')} (e.g. {_drop_example(unexpected[0])}); each drop "
            "is reported. "
            "A layer-0 input_layernorm in an EAGLE-1 head, or a `model.` prefix, means the file is not a head we know "
            "how to run.")
    spec = build_spec(kind, flat, tensors, target_config, notes, ckpt.label, layout.nested_taps)
    return DraftHead(ckpt, layout, reason, spec, tensors, tuple(dropped), tuple(notes))


def _drop_example(name: str) -> str:
    return option("drop", f"'{name}'", python=f"drop=[{name!r}]")


def _shape(tensors: dict[str, TensorRef], name: str) -> tuple[int, ...] | None:
    return tensors[name].shape if name in tensors else None


def build_spec(kind, cfg, tensors, target_config, notes, label, nested_taps="vllm-nested") -> DraftSpec:
    """The spec of a head of `kind`, by its row's builder, from the fields every kind reads alike (common_fields)."""
    head_kind = KINDS[kind]
    for name in head_kind.required_tensors:
        if name not in tensors:
            raise LayoutError(f"{label} has no {name}.", "This is not an EAGLE draft head; check the path.")
    common = common_fields(cfg, notes, label)
    return head_kind.build_spec(cfg, tensors, common, target_config, notes, label, nested_taps)


def common_fields(cfg, notes, label) -> dict:
    """The DraftSpec fields every kind reads the same way from its config (notes say what was defaulted)."""
    where = label
    hidden = int(_require(cfg, "hidden_size", where))
    heads = int(_require(cfg, "num_attention_heads", where))
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    theta, scaling, explicit = read_rope(cfg)
    if not explicit:
        notes.append(f"the draft config has no rope_theta: using {DEFAULT_ROPE_THETA:g}, the EAGLE reference's "
                     "and transformers' default, and writing it explicitly")
    if "rms_norm_eps" not in cfg:
        notes.append("the draft config has no rms_norm_eps: using transformers' Llama default 1e-6")
    vocab = int(_require(cfg, "vocab_size", where))
    return dict(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=int(_require(cfg, "intermediate_size", where)),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_scaling=scaling,
        vocab_size=vocab, max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
        hidden_act=cfg.get("hidden_act", "silu"), extra=dict(cfg),
    )


def eagle1_spec(cfg, tensors, common, target_config, notes, label, nested_taps="vllm-nested") -> DraftSpec:
    """An EAGLE-1 head: fc over [embedding ; feature], an optional fc bias (SafeAILab's `bias`), Qwen2 q/k/v biases."""
    hidden = common["hidden_size"]
    layer_ids = {int(m.group(1)) for n in tensors if (m := re.match(r"layers\.(\d+)\.", n))}
    if int(cfg.get("num_hidden_layers", 1)) != max(len(layer_ids), 1):
        notes.append(f"config says num_hidden_layers={cfg.get('num_hidden_layers')} but the tensors hold "
                     f"{len(layer_ids)} layer; using {len(layer_ids)} (the tensors win)")
    fc_shape = tensors["fc.weight"].shape
    if fc_shape != (hidden, 2 * hidden):
        raise ShapeMismatchError(f"{label}: fc.weight is {list(fc_shape)}, expected [{hidden}, {2 * hidden}] "
                                 "(hidden, [embedding ; feature]).", "The head does not match its own config.")
    has_bias = "fc.bias" in tensors
    flag = cfg.get("bias", True)  # SafeAILab: absent means true
    if bool(flag) != has_bias:
        notes.append(f"config says bias={cfg.get('bias')!r} but fc.bias is {'present' if has_bias else 'absent'}; "
                     "following the tensors")
    qkv = any(f"layers.0.self_attn.{p}_proj.bias" in tensors for p in "qkv")
    qwen = qkv or cfg.get("model_type") == "qwen2"
    return DraftSpec(kind=EAGLE1, fc_bias=has_bias, qkv_bias=qkv, base_model_type="qwen2" if qwen else "llama",
                     **common)


def eagle3_spec(cfg, tensors, common, target_config, notes, label, nested_taps="vllm-nested") -> DraftSpec:
    """An EAGLE-3 head: its variant read from the tensors (variants.py), its own LM head and d2t, or the target's."""
    hidden, vocab = common["hidden_size"], common["vocab_size"]
    variant = detect_eagle3(cfg, {n: tuple(r.shape) for n, r in tensors.items()}, hidden=hidden,
                            target_config=target_config, label=label, nested_taps=nested_taps)
    notes += variant.notes
    lm_rows = _shape(tensors, "lm_head.weight")
    stated_vocab = cfg.get("draft_vocab_size")
    from_target = lm_rows is None
    if from_target:  # draft_vocab_size null and no lm_head: engines use the target's LM head (written explicitly)
        if stated_vocab is not None and int(stated_vocab) != vocab:
            raise LayoutError(f"{label}: EAGLE-3 head without lm_head.weight but draft_vocab_size={stated_vocab}.",
                              "The head is incomplete; re-export it with its lm_head.")
        notes.append("no lm_head.weight and draft_vocab_size null: the head uses the target's LM head over the full "
                     "vocabulary (as vLLM and SGLang do); it is copied into the output and stated")
    elif stated_vocab is None:
        notes.append(f"draft_vocab_size is null: read as {lm_rows[0]} from lm_head.weight and written explicitly")
    draft_vocab = int(stated_vocab or (lm_rows[0] if lm_rows else vocab))
    for what, n in (("lm_head.weight rows", (lm_rows or [draft_vocab])[0]),
                    ("d2t length", (_shape(tensors, "d2t") or [draft_vocab])[0])):
        if n != draft_vocab:
            raise ShapeMismatchError(f"{label}: draft_vocab_size={draft_vocab} but {what} = {n}.",
                                     "The head's config and tensors disagree; re-export it.")
    if draft_vocab < vocab and "d2t" not in tensors:
        raise LayoutError(f"{label}: the draft vocabulary ({draft_vocab}) is smaller than the target's ({vocab}) but "
                          "there is no d2t tensor to map draft ids to target ids.",
                          "Without d2t an engine reads draft id i as target id i and acceptance collapses; use the "
                          "export that includes d2t.")
    if cfg.get("tie_word_embeddings") and not from_target:
        notes.append("config says tie_word_embeddings: true (copied from the target), but the head has its own "
                     "lm_head.weight: written as false (SGLang would otherwise use the embedding as the LM head)")
    sources = dict(variant.sources, lm_head=("the target's (no lm_head.weight, draft_vocab_size null)" if from_target
                                             else f"the draft's own lm_head.weight ({draft_vocab} rows)"))
    return DraftSpec(kind=EAGLE3, draft_vocab_size=draft_vocab, target_hidden_size=variant.target_hidden_size,
                     aux_layer_ids=variant.aux_layer_ids, aux_ids_origin=variant.aux_ids_origin,
                     norm_before_residual=variant.norm_before_residual,
                     num_aux_states=variant.num_aux_states, norm_before_fc=variant.norm_before_fc,
                     fc_norm=variant.fc_norm, norm_output=variant.norm_output, num_layers=variant.num_layers,
                     qk_norm=variant.qk_norm, lm_head_from_target=from_target, fc_bias="fc.bias" in tensors,
                     base_model_type="qwen3" if variant.qk_norm else "llama", flag_sources=sources, **common)


def _read_in_layout(ckpt: Checkpoint, target_config: dict | None, *, label: str | None = None,
                    drop: tuple[str, ...] = ()) -> DraftHead:
    """The reader of the kinds a draft layout holds (messages name the checkpoint as it was opened)."""
    return load_draft(ckpt, target_config, drop=drop)


register(EAGLE1, reader=_read_in_layout, spec_builder=eagle1_spec)
register(EAGLE3, reader=_read_in_layout, spec_builder=eagle3_spec)


def tensor_reader(head: DraftHead):
    """get_tensor(canonical name) for the bench runner: reads one tensor on demand; KeyError when absent."""
    from ..checkpoint.read import read_tensor

    def get(name: str):
        if name not in head.tensors:
            raise KeyError(name)
        return read_tensor(head.checkpoint, head.tensors[name])

    return get


from . import dflash_head  # noqa: E402, F401  (fills DFlash's row in kinds.py; it imports this module's reader)
