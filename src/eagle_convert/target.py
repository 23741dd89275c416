"""What the converter needs from a target checkpoint: sizes, dtype, and where its embedding and LM head live."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checkpoint import Checkpoint, TensorRef
from .errors import LayoutError, MissingTensorError
from .spec import TARGET_EMBED as EMBED
from .spec import TARGET_LM_HEAD as LM_HEAD

DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class TargetInfo:
    checkpoint: Checkpoint
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    tied: bool
    dtype_name: str | None  # the config's torch_dtype (or transformers 5 `dtype`), when it names a float type

    @property
    def config(self) -> dict:
        return self.checkpoint.config

    def embedding(self) -> TensorRef:
        return self.checkpoint.ref(EMBED)

    def lm_head(self) -> TensorRef:
        """The target's LM head: `lm_head.weight`, or the input embedding when the embeddings are tied."""
        if self.checkpoint.has(LM_HEAD):
            return self.checkpoint.ref(LM_HEAD)
        if self.tied:
            return self.checkpoint.ref(EMBED)
        raise MissingTensorError(
            f"The target {self.checkpoint.label} has no lm_head.weight and its config does not tie the embeddings "
            "(tie_word_embeddings is false).",
            "The target checkpoint is incomplete, or TARGET is not the model the head was trained for.")


def _text_config(config: dict) -> dict:
    # Multimodal wrappers keep the language model's sizes in text_config.
    return config.get("text_config") if isinstance(config.get("text_config"), dict) else config


def read_target(ckpt: Checkpoint) -> TargetInfo:
    cfg = _text_config(ckpt.config)
    missing = [k for k in ("hidden_size", "vocab_size", "num_hidden_layers") if k not in cfg]
    if missing:
        raise LayoutError(f"The target config ({ckpt.label}) has no {', '.join(missing)}.",
                          "TARGET must be a Hugging Face causal-LM checkpoint (config.json with the model sizes).")
    # A per-rank save holds the engine's runtime dtype, whatever the config it copied says (ranks/checkpoint.py).
    dtype = ckpt.stored_dtype or cfg.get("torch_dtype") or cfg.get("dtype") \
        or ckpt.config.get("torch_dtype")
    return TargetInfo(
        checkpoint=ckpt,
        hidden_size=int(cfg["hidden_size"]),
        vocab_size=int(cfg["vocab_size"]),
        num_hidden_layers=int(cfg["num_hidden_layers"]),
        tied=bool(cfg.get("tie_word_embeddings", ckpt.config.get("tie_word_embeddings", False))),
        dtype_name=dtype if dtype in DTYPE_NAMES else None,
    )
