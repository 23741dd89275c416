"""What an MTP checkpoint is, told from its config and tensor names alone: a target holding its MTP layers beside its
trunk, or a draft folder holding nothing but MTP layers, in the layout `convert --mtp --to vllm` writes (the target's
config, the original names) or in SGLang's NextN layout (`--to sglang`, or SGLang's own export script)."""

from __future__ import annotations

from .families import family_for
from .signature import trunk_layers


def extracted_layout(config: dict, names) -> str | None:
    """"vllm" or "sglang" for a folder that holds only MTP tensors; None for anything else (a target, whose trunk
    tensors lie outside the MTP area, a draft of another kind, an empty folder)."""
    family = family_for(config)
    names = list(names)
    if family is None or not names:
        return None
    trunk = trunk_layers(family, config)
    if not all(family.in_area(name, trunk) for name in names):
        return None
    return "sglang" if family.nextn_architecture in (config.get("architectures") or []) else "vllm"


def mtp_owner(config: dict, names, label: str) -> str:
    """Whose MTP layers a message is about: the draft folder's (named) or the target's."""
    return f"The MTP draft folder {label}'s" if extracted_layout(config, names) else "The target's"
