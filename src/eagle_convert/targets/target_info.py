"""What the converter needs from a target checkpoint: sizes, dtype, and where its embedding and LM head live (found
through its family's table in targets/, or named with --target-lm-head / --target-embed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..checkpoint.index import Checkpoint, TensorRef, config_dtype
from ..errors import LayoutError, MissingTensorError, ShapeMismatchError
from . import CAUSAL_LM, TargetFamily, family_for, family_names
from .quant import StoredWeight, block_size_of, has_packed_form, stored_weight

DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class TargetInfo:
    checkpoint: Checkpoint  # where the LM head and embedding are read: the target, or --lm-head-from
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int  # what EAGLE-3 aux layer ids index (the text model's, for a multimodal wrapper)
    tied: bool
    dtype_name: str | None  # the config's torch_dtype (or transformers 5 `dtype`), when it names a float type
    family: TargetFamily | None = None
    embed_name: str = CAUSAL_LM.embed
    lm_head_name: str | None = CAUSAL_LM.lm_head  # None: tied, the embedding is the LM head
    found_by: str = ""  # how the names were found (a family's naming, the overrides), for notes and inspect
    config_checkpoint: Checkpoint | None = None  # the target itself, when tensors come from --lm-head-from
    notes: tuple[str, ...] = field(default=())

    @property
    def config(self) -> dict:
        """The target's config, with a multimodal wrapper's text-model fields (layer count, positions) lifted to the
        top, where the draft's defaults (EAGLE-3 aux layer ids) and the output configs read them."""
        top = (self.config_checkpoint or self.checkpoint).config
        text = self.family.sizes_config(top) if self.family else top
        return top if text is top else {**top, **{k: v for k, v in text.items() if k not in ("architectures",
                                                                                              "model_type")}}

    @property
    def label(self) -> str:
        return (self.config_checkpoint or self.checkpoint).label

    def embedding(self) -> TensorRef:
        return self.embedding_weight().ref

    def lm_head(self) -> TensorRef:
        """The target's LM head, or its input embedding when the embeddings are tied."""
        return self.lm_head_weight().ref

    def embedding_weight(self) -> StoredWeight:
        return stored_weight(self.checkpoint, self.embed_name, (self.vocab_size, self.hidden_size), "input embedding",
                             block_size_of(self.checkpoint.config))

    def lm_head_weight(self) -> StoredWeight:
        if self.lm_head_name is None:
            return self.embedding_weight()
        return stored_weight(self.checkpoint, self.lm_head_name, (self.vocab_size, self.hidden_size), "LM head",
                             block_size_of(self.checkpoint.config))


def _present(ckpt: Checkpoint, name: str) -> bool:
    return ckpt.has(name) or has_packed_form(ckpt, name)


def _unknown(ckpt: Checkpoint, what: str, tried: list[str]) -> LayoutError:
    return LayoutError(
        f"The target {ckpt.label} is {what}, and its {' / '.join(tried) or 'LM head and embedding'} are not where "
        f"eagle-convert looks. Known families: {family_names()} (text-only and conditional-generation checkpoints, "
        "pre- and post-2025 transformers names).",
        "Name the tensors yourself: --target-lm-head NAME (the LM head, e.g. language_model.lm_head.weight) and "
        "--target-embed NAME (the input embedding, e.g. language_model.model.embed_tokens.weight); "
        "`eagle-convert inspect TARGET` lists the checkpoint's tensors.")


def find_names(ckpt: Checkpoint, family: TargetFamily | None, tied: bool, lm_head: str | None = None,
               embed: str | None = None) -> tuple[str, str | None, str]:
    """(embedding name, LM head name or None when tied, how they were found)."""
    if lm_head or embed:
        for name in (n for n in (lm_head, embed) if n):
            if not _present(ckpt, name):
                raise MissingTensorError(f"The target {ckpt.label} has no tensor {name!r}.",
                                         "Check the name with `eagle-convert inspect TARGET`.")
    namings = family.namings if family else (CAUSAL_LM,)
    for naming in namings:
        e = embed or naming.embed
        if not _present(ckpt, e):
            continue
        head = lm_head or naming.lm_head
        if _present(ckpt, head):
            return e, head, "--target-lm-head / --target-embed" if lm_head or embed else naming.name
        if tied and not lm_head:
            return e, None, (naming.name if not embed else "--target-embed") + ", tied"
    what = f"a {family.name} checkpoint" if family else \
        f"an unknown architecture (model_type {ckpt.config.get('model_type')!r})"
    tried = [n for naming in namings for n in (naming.lm_head, naming.embed)]
    if lm_head or embed:
        raise MissingTensorError(
            f"The target {ckpt.label} has {'no LM head' if embed and not lm_head else 'no input embedding'} beside "
            f"the one named (and {'tie_word_embeddings is false' if not tied else 'the family names none'}).",
            "Pass both --target-lm-head NAME and --target-embed NAME.")
    if tied is False and any(_present(ckpt, naming.embed) for naming in namings):
        raise MissingTensorError(
            f"The target {ckpt.label} ({what}) has no {' or '.join(sorted({n.lm_head for n in namings}))} and its "
            "config does not tie the embeddings (tie_word_embeddings is false).",
            "The target checkpoint is incomplete, or TARGET is not the model the head was trained for; "
            "--target-lm-head NAME names another tensor.")
    raise _unknown(ckpt, what, sorted(set(tried)))


def read_target(ckpt: Checkpoint, *, lm_head: str | None = None, embed: str | None = None,
                lm_head_from: Checkpoint | None = None) -> TargetInfo:
    """The target's sizes and where its LM head and embedding live. `lm_head_from`: read those two from another
    checkpoint (an unquantized base), which must have the same vocab and hidden size."""
    family = family_for(ckpt.config)
    info = _sizes(ckpt, family)
    source = ckpt
    notes = []
    if lm_head_from is not None:
        other = family_for(lm_head_from.config)
        base = _sizes(lm_head_from, other)
        for what, a, b in (("vocab_size", info["vocab_size"], base["vocab_size"]),
                           ("hidden_size", info["hidden_size"], base["hidden_size"])):
            if a != b:
                raise ShapeMismatchError(
                    f"--lm-head-from {lm_head_from.label} has {what} {b}, the target {ckpt.label} has {a}.",
                    "Pass the unquantized checkpoint of this same model (its bf16 base).")
        source, family_of_source, info["tied"] = lm_head_from, other, base["tied"]
        notes.append(f"LM head and embedding read from --lm-head-from {lm_head_from.label}")
    else:
        family_of_source = family
    embed_name, head_name, found = find_names(source, family_of_source, info["tied"], lm_head, embed)
    if family is None:
        notes.append(f"model_type {ckpt.config.get('model_type')!r} is not a known family; "
                     f"using {head_name or embed_name} / {embed_name} found by name")
    return TargetInfo(checkpoint=source, family=family, embed_name=embed_name, lm_head_name=head_name,
                      found_by=found, config_checkpoint=ckpt if source is not ckpt else None, notes=tuple(notes),
                      **info)


def _sizes(ckpt: Checkpoint, family: TargetFamily | None) -> dict:
    top = ckpt.config
    cfg = family.sizes_config(top) if family else (
        top["text_config"] if isinstance(top.get("text_config"), dict) and "hidden_size" in top["text_config"] else top)
    missing = [k for k in ("hidden_size", "vocab_size", "num_hidden_layers") if k not in cfg]
    if missing:
        raise LayoutError(f"The target config ({ckpt.label}) has no {', '.join(missing)}.",
                          "TARGET must be a Hugging Face causal-LM checkpoint (config.json with the model sizes).")
    # A per-rank save holds the engine's runtime dtype, whatever the config it copied says (ranks/checkpoint.py).
    dtype = ckpt.stored_dtype or config_dtype(cfg) or config_dtype(top)
    return dict(hidden_size=int(cfg["hidden_size"]), vocab_size=int(cfg["vocab_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                tied=bool(cfg.get("tie_word_embeddings", top.get("tie_word_embeddings", False))),
                dtype_name=dtype if dtype in DTYPE_NAMES else None)
