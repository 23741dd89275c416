"""Read a draft checkpoint in any known layout into a `DraftSpec` plus canonical tensor names (reads headers only)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .checkpoint import Checkpoint, TensorRef
from .errors import LayoutError, ShapeMismatchError, UnexpectedTensorError
from .formats import CANONICAL_NAMES, Layout, detect_layout
from .formats.base import matches_any
from .spec import DEFAULT_ROPE_THETA, EAGLE1, EAGLE3, DraftSpec, default_aux_layer_ids


@dataclass(frozen=True)
class DraftHead:
    checkpoint: Checkpoint
    layout: Layout
    layout_reason: str
    spec: DraftSpec
    tensors: dict[str, TensorRef]  # canonical name -> where it is stored
    dropped: tuple[tuple[str, str], ...]  # (source name, why) for tensors the user dropped
    notes: tuple[str, ...]  # what we corrected or inferred, shown to the user


def _kind(config: dict, names: frozenset[str]) -> str:
    archs = " ".join(config.get("architectures") or [])
    if (any(n.startswith("midlayer.") for n in names) or "d2t" in names or "layers.0.hidden_norm.weight" in names
            or "Eagle3" in archs or config.get("speculators_model_type") == "eagle3"):
        return EAGLE3
    return EAGLE1


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
    layout, reason = detect_layout(ckpt.config, names)
    if layout is None:
        sample = ", ".join(sorted(names)[:8])
        raise LayoutError(
            f"{ckpt.label} is not in a draft layout we recognise: found tensors {sample}{' ...' if len(names) > 8 else ''} "
            f"and architectures {ckpt.config.get('architectures')}.",
            "eagle-convert reads EAGLE-1/2 and EAGLE-3 heads (SafeAILab, SpecForge, ModelOpt, speculators, vLLM and "
            "SGLang layouts); run `eagle-convert inspect` on it, and check that DRAFT is the draft head, not the target.")
    flat = layout.flat_config(ckpt.config)
    kind = _kind(ckpt.config, names)
    notes: list[str] = []

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
            f"{ckpt.label} ({kind.upper()} head, {layout.name} layout) has tensors no rule maps: {', '.join(unexpected)}.",
            "If they are not part of the head, drop them explicitly with --drop PATTERN (e.g. --drop "
            f"'{unexpected[0]}'); each drop is reported. A layer-0 input_layernorm in an EAGLE-1 head, or a `model.` "
            "prefix, means the file is not a head we know how to run.")
    spec = _build_spec(kind, flat, tensors, target_config, notes, ckpt.label)
    return DraftHead(ckpt, layout, reason, spec, tensors, tuple(dropped), tuple(notes))


def _shape(tensors: dict[str, TensorRef], name: str) -> tuple[int, ...] | None:
    return tensors[name].shape if name in tensors else None


def _build_spec(kind, cfg, tensors, target_config, notes, label) -> DraftSpec:
    where = label
    if "fc.weight" not in tensors:
        raise LayoutError(f"{label} has no fc.weight.", "This is not an EAGLE draft head; check the path.")
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
    layer_ids = {int(m.group(1)) for n in tensors if (m := re.match(r"layers\.(\d+)\.", n))}
    if int(cfg.get("num_hidden_layers", 1)) != max(len(layer_ids), 1):
        notes.append(f"config says num_hidden_layers={cfg.get('num_hidden_layers')} but the tensors hold "
                     f"{len(layer_ids)} layer; using {len(layer_ids)} (the tensors win)")
    vocab = int(_require(cfg, "vocab_size", where))
    fc_shape = tensors["fc.weight"].shape
    common = dict(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=int(_require(cfg, "intermediate_size", where)),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_scaling=scaling,
        vocab_size=vocab, max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
        hidden_act=cfg.get("hidden_act", "silu"), extra=dict(cfg),
    )
    if kind == EAGLE1:
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
    # EAGLE-3
    if fc_shape[0] != hidden or fc_shape[1] % 3:
        raise ShapeMismatchError(f"{label}: fc.weight is {list(fc_shape)}, expected [{hidden}, 3 x target hidden].",
                                 "The head does not match its own config.")
    target_hidden = fc_shape[1] // 3
    if "target_hidden_size" in cfg and int(cfg["target_hidden_size"]) != target_hidden:
        raise ShapeMismatchError(f"{label}: config target_hidden_size={cfg['target_hidden_size']} but fc.weight "
                                 f"takes 3 x {target_hidden}.", "Fix target_hidden_size in the draft config.")
    lm_rows = _shape(tensors, "lm_head.weight")
    if lm_rows is None:
        raise LayoutError(f"{label}: EAGLE-3 head without lm_head.weight.", "The head is incomplete; re-export it.")
    draft_vocab = int(cfg.get("draft_vocab_size") or lm_rows[0])
    for what, n in (("lm_head.weight rows", lm_rows[0]), ("d2t length", (_shape(tensors, "d2t") or [draft_vocab])[0])):
        if n != draft_vocab:
            raise ShapeMismatchError(f"{label}: draft_vocab_size={draft_vocab} but {what} = {n}.",
                                     "The head's config and tensors disagree; re-export it.")
    if draft_vocab < vocab and "d2t" not in tensors:
        raise LayoutError(f"{label}: the draft vocabulary ({draft_vocab}) is smaller than the target's ({vocab}) but "
                          "there is no d2t tensor to map draft ids to target ids.",
                          "Without d2t an engine reads draft id i as target id i and acceptance collapses; use the "
                          "export that includes d2t.")
    num_layers = int((target_config or {}).get("num_hidden_layers") or 0)
    aux = cfg.get("eagle_aux_hidden_state_layer_ids")
    if aux is None:
        aux = default_aux_layer_ids(num_layers) if num_layers else None
        if aux is not None:
            notes.append(f"aux layer ids not in the config: using the EAGLE-3 default {list(aux)} (2, L//2, L-3 for "
                         f"a {num_layers}-layer target), written explicitly")
    return DraftSpec(kind=EAGLE3, draft_vocab_size=draft_vocab, target_hidden_size=target_hidden,
                     aux_layer_ids=tuple(int(i) for i in aux) if aux is not None else None,
                     norm_before_residual=bool(cfg.get("norm_before_residual")), **common)


def tensor_reader(head: DraftHead):
    """get_tensor(canonical name) for the bench runner: reads one tensor on demand; KeyError when absent."""
    from .io.read import read_tensor

    def get(name: str):
        if name not in head.tensors:
            raise KeyError(name)
        return read_tensor(head.checkpoint, head.tensors[name])

    return get
