"""DFlash heads (kinds.py "dflash"): the spec a z-lab or speculators DFlash checkpoint describes, with its target
layers read through its layout's tap row (taps/conventions.py) and the target's embedding and LM head checked to fit.
Importing this module fills DFlash's row (its reader is the draft layouts' reader, draft/load.py)."""

from __future__ import annotations

from ..errors import LayoutError, ShapeMismatchError
from ..kinds import DFLASH, register
from ..layouts.dflash_zlab import BLOCK_KEYS
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS
from .load import _read_in_layout


def dflash_spec(cfg, tensors, common, target_config, notes, label, nested_taps="dflash") -> DraftSpec:
    block = cfg.get(BLOCK_KEYS) or {}
    block_size, mask = block.get("block_size"), block.get("mask_token_id")
    if not _integer(block_size) or block_size < 2 or not _integer(mask):
        raise LayoutError(f"{label}: a DFlash head needs an integer block_size >= 2 and mask_token_id; the config "
                          f"says block_size={block_size!r}, mask_token_id={mask!r}.",
                          "Copy them from the release's config (dflash_config in z-lab's layout, top level in "
                          "speculators').")
    row = CONVENTIONS[nested_taps]
    stored = row.read(cfg)
    if not stored:
        raise LayoutError(f"{label}: the DFlash config states no target layers ({row.key}).",
                          "State the layers the head was trained on; there is no default to fall back on.")
    if not isinstance(stored, list) or not all(_integer(i) for i in stored):
        # a string or float id would be read as some layer (int("2"), int(0.5)): refused, never guessed
        raise LayoutError(f"{label}: the DFlash config's {row.key} is {stored!r:.80}, not a list of integer layer "
                          "ids.", "Copy the list from the release's config.")
    if list(stored) != sorted(set(stored)):
        # vLLM concatenates the tapped states in layer order, z-lab's forward in the listed order: for a list out of
        # order (or with a layer twice) the engines feed fc different inputs, and no config says which one it learnt
        raise LayoutError(f"{label}: the DFlash config's {row.key} {stored!r:.80} is not strictly ascending; vLLM "
                          "concatenates the tapped states in layer order and z-lab's code in the listed order, so "
                          "the engines would feed this head different inputs.",
                          "Use the release's list; if the head was trained in layer order, sort it (and drop repeats) "
                          "in the config before converting.")
    ids = row.to_internal(stored)
    hidden, vocab = common["hidden_size"], common["vocab_size"]
    fc = tensors["fc.weight"].shape
    if fc != (hidden, len(ids) * hidden):
        raise ShapeMismatchError(f"{label}: fc.weight is {list(fc)}, expected [{hidden}, {len(ids) * hidden}] "
                                 f"({len(ids)} tapped target states of width {hidden}).",
                                 "The head's taps and its fc disagree: use the config it was exported with.")
    layers = {int(n.split(".")[1]) for n in tensors if n.startswith("layers.")}
    target_layers = _target_fit(target_config, ids, mask, vocab, hidden, label)
    return DraftSpec(kind=DFLASH, aux_layer_ids=tuple(ids), aux_ids_origin=row.name, block_size=block_size,
                     mask_token_id=mask, causal=bool(block.get("causal")), num_layers=max(len(layers), 1),
                     qk_norm=True, base_model_type="qwen3", num_target_layers=target_layers,
                     target_hidden_size=hidden, **common)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a count


def _target_fit(target_config: dict | None, ids, mask: int, vocab: int, hidden: int, label: str) -> int | None:
    """The target's embedding and LM head are the head's own: its vocabulary must hold the mask token and its layers
    the taps (sizes: conversion/validate.py). Returns the target's layer count."""
    if mask >= vocab or mask < 0:
        raise ShapeMismatchError(f"{label}: mask_token_id {mask} is not an id of the {vocab}-token vocabulary.",
                                 "The head and its config disagree; use the release's config.")
    if not target_config:
        return None
    inner = target_config.get("text_config") if isinstance(target_config.get("text_config"), dict) else target_config
    n, target_vocab = inner.get("num_hidden_layers"), inner.get("vocab_size")
    if target_vocab is not None and mask >= int(target_vocab):
        raise ShapeMismatchError(f"{label}: mask_token_id {mask} is past the target's vocabulary ({target_vocab}): "
                                 "its embedding has no row for it.", "Pass the target the head was trained for.")
    if n is not None and any(not 1 <= i <= int(n) for i in ids):
        raise ShapeMismatchError(f"{label}: the head taps the outputs of target layers "
                                 f"{CONVENTIONS['dflash'].to_stored(ids)}, not all among the {n} layers of the "
                                 "target.", "Pass the target the head was trained for.")
    return int(n) if n is not None else None


register(DFLASH, reader=_read_in_layout, spec_builder=dflash_spec)
