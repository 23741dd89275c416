"""An MTP head as a draft: the MTP layer(s) a target ships, read from a folder `convert --mtp --to vllm` wrote (the
target's config verbatim, the MTP tensors under their original names) or from the target itself.

Engines build the MTP module from the *target's* config, so a folder's config must be its target's: the sizes are
compared and a mismatch is refused. Canonical names (what the runner reads) are the layer's own names under
`layers.{i}.` (MiMo: `model.mtp_layers.{i}.input_proj.weight` -> `layers.{i}.input_proj.weight`). Copies of the
embedding and LM head a folder may carry are left out: vLLM shares the target's, and so does the runner."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..checkpoint.index import Checkpoint, TensorRef
from ..errors import LayoutError
from ..kinds import MTP
from ..spec import DraftSpec
from .load import common_fields
from .mtp_families import MtpFamily, mtp_family_of

# What engines take from the target, not the MTP layer, whichever copy a folder carries (vLLM 0.32 shares them)
SHARED = re.compile(r"(^|\.)(embed_tokens|shared_head\.head|lm_head)\.weight$")
# What must agree between an MTP folder's config and its target's: vLLM builds the layer from the target's
SIZES = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "intermediate_size")


@dataclass(frozen=True)
class MtpDraft:
    checkpoint: Checkpoint
    family: MtpFamily
    spec: DraftSpec
    tensors: dict[str, TensorRef]  # canonical name -> where it is stored
    from_target: bool  # the checkpoint is the target itself (it holds the trunk too)
    notes: tuple[str, ...]

    @property
    def layout_name(self) -> str:
        return "the target's own MTP layer" if self.from_target else f"mtp ({self.family.name}, target's names)"


def looks_mtp(config: dict, names: frozenset[str] | set[str]) -> bool:
    """Whether a checkpoint holds MTP layers: its family says where they live, and tensors are there."""
    family = mtp_family_of(config)
    return family is not None and any(family.owns(config, n) for n in names)


def load_mtp_draft(ckpt: Checkpoint, target_config: dict, *, label: str | None = None) -> MtpDraft:
    label = label or ckpt.label
    config, names = ckpt.config, frozenset(ckpt.names())
    family = mtp_family_of(config)
    if family is None or not any(family.owns(config, n) for n in names):
        raise LayoutError(f"{label} holds no MTP layer we know (architectures {config.get('architectures')}).",
                          "Pass a folder written by `eagle-convert convert --mtp TARGET --to vllm`, or the target "
                          "itself with --mtp-from-target.")
    _check_same_target(config, target_config, label)
    from_target = any(n.startswith("model.layers.0.") for n in names)
    notes: list[str] = []
    tensors: dict[str, TensorRef] = {}
    for name in sorted(names):
        if not family.owns(config, name):
            continue
        if SHARED.search(name):
            notes.append(f"{name} not used: engines share the target's embedding and LM head with the MTP layer")
            continue
        tensors[family.canonical(config, name)] = ckpt.ref(name)
    spec = mtp_spec(config, tensors, common_fields(family.sizes_config(config), notes, label), target_config,
                    notes, label, family=family)
    return MtpDraft(ckpt, family, spec, tensors, from_target, tuple(notes))


def _check_same_target(config: dict, target_config: dict, label: str) -> None:
    differ = [f"{k} {config.get(k)} vs {target_config.get(k)}" for k in ("architectures", *SIZES)
              if config.get(k) != target_config.get(k)]
    if differ:
        raise LayoutError(f"{label} is an MTP head whose config is not its target's ({'; '.join(differ)}).",
                          "Engines build the MTP layer from the target's config: bench it on the target it was "
                          "extracted from (`convert --mtp TARGET --to vllm` copies that config verbatim).")


def mtp_spec(cfg, tensors, common, target_config, notes, label, nested_aux_offset=0, *, family=None) -> DraftSpec:
    """An MTP head's spec: the target's own sizes and RoPE (the layer is one of the target's), its family."""
    family = family or mtp_family_of(cfg)
    sizes = family.sizes_config(cfg)
    qkv_bias = any(n.endswith("self_attn.q_proj.bias") for n in tensors)
    return DraftSpec(kind=MTP, qkv_bias=qkv_bias, base_model_type=sizes.get("model_type", "qwen2"),
                     mtp_family=family.name, mtp_hidden_first=family.hidden_first, **common)
