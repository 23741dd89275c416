"""An MTP head as a draft for `bench`: the MTP layer(s) of a target, read from a folder `convert --mtp --to vllm`
wrote (the target's config verbatim, the MTP tensors under their original names) or from the target itself.

Engines build the MTP module from the *target's* config, so a folder's config must be its target's: the sizes are
compared and a difference is refused. The layers are found and checked complete as extraction checks them
(locate.find_mtp): vLLM itself loads a layer with a tensor missing without a word. Canonical names, what the runner
reads, are a layer's own names under `layers.{i}.` (MiMo: `model.mtp_layers.0.input_proj.weight` ->
`layers.0.input_proj.weight`); copies of the embedding and LM head are left out, as vLLM shares the target's.

Importing this module fills MTP's row in the kinds table (kinds.py): its recogniser (`looks_mtp`), its reader and its
spec builder, so that `draft.load.open_head` reads an MTP head like any other."""

from __future__ import annotations

from dataclasses import dataclass

from ..checkpoint.index import Checkpoint, TensorRef
from ..draft.load import DraftHead, build_spec
from ..errors import LayoutError
from ..kinds import MTP, register
from ..spec import DraftSpec
from .families import HIDDEN_EMB, MtpFamily, family_for, text_config
from .folder import extracted_layout
from .locate import find_mtp
from .signature import trunk_layers

# What must agree between an MTP folder's config and its target's (vLLM builds the layer from the target's).
SAME = ("architectures", "model_type", "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
        "num_key_value_heads", "intermediate_size", "num_nextn_predict_layers", "mtp_num_hidden_layers")


@dataclass(frozen=True)
class MtpDraft(DraftHead):
    """A DraftHead of the MTP kind: no draft layout (`layout` None), the MTP family it belongs to instead."""
    family: MtpFamily
    from_target: bool  # the checkpoint holds the trunk too (it is a target, not an extraction)

    @property
    def layout_name(self) -> str:
        return f"mtp ({self.family.name}, {'inside the target' if self.from_target else 'extracted'})"


def looks_mtp(config: dict, names) -> bool:
    """Whether a checkpoint is an MTP head (or a target holding one): a family of the table, and tensors in its MTP
    area. An EAGLE head's config copied from such a target has no tensor there."""
    family = family_for(config)
    if family is None:
        return False
    trunk = trunk_layers(family, config)
    return any(family.in_area(name, trunk) for name in names)


def load_mtp_draft(ckpt: Checkpoint, target_config: dict, *, label: str | None = None,
                   drop: tuple[str, ...] = ()) -> MtpDraft:
    """The MTP layers of `ckpt`, complete (or refused by name), as a draft of the target whose config is given (MTP's
    reader in the kinds table: reached through draft.load.open_head)."""
    label = label or ckpt.label
    if drop:
        raise LayoutError(f"--drop does not apply to the MTP head {label}: engines load the MTP layer whole.",
                          "Extract the layer with `eagle-convert convert --mtp TARGET --to vllm` (which checks it is "
                          "complete) and bench that folder without --drop.")
    names = frozenset(ckpt.names())
    if extracted_layout(ckpt.config, names) == "sglang":
        raise LayoutError(f"{label} is an MTP head in SGLang's NextN layout (`convert --mtp --to sglang`): vLLM and "
                          "the bench runner read the vllm layout, the target's config with the layer under its "
                          "original name.", "Extract it with `eagle-convert convert --mtp TARGET -o DIR --to vllm` "
                          "and bench DIR; serve this folder in SGLang (`eagle-convert inspect` prints the command).")
    check_same_target(ckpt.config, target_config, label)
    layers = find_mtp(ckpt)
    family, config = layers.family, text_config(ckpt.config)
    notes = list(layers.notes)
    tensors: dict[str, TensorRef] = {}
    for i in range(layers.count):
        prefix = family.block.format(L=family.layer_index(i, layers.trunk_layers))
        for name, ref in layers.refs.items():
            if name.startswith(prefix) and name not in layers.copies:
                tensors[f"layers.{i}." + name[len(prefix):]] = ref
    if layers.copies:
        notes.append(f"{', '.join(layers.copies)}: not used (engines share the target's embedding and LM head)")
    from_target = extracted_layout(ckpt.config, names) is None
    spec = build_spec(MTP, config, tensors, target_config, notes, label)
    return MtpDraft(ckpt, None, f"the MTP layers of a {family.name} target", spec, tensors, (), tuple(notes),
                    family=family, from_target=from_target)


def check_same_target(config: dict, target_config: dict, label: str) -> None:
    differ = [f"{key} {config.get(key)!r} vs the target's {target_config.get(key)!r}" for key in SAME
              if config.get(key) != target_config.get(key)]
    if differ:
        raise LayoutError(f"{label} is an MTP head whose config is not its target's: {'; '.join(differ)}.",
                          "Engines build the MTP layer from the target's own config: bench it on the target it was "
                          "extracted from (`convert --mtp TARGET --to vllm` copies that config verbatim).")


def mtp_spec(cfg, tensors, common, target_config, notes, label, nested_taps="vllm-nested") -> DraftSpec:
    """An MTP head's spec: the target's own sizes and RoPE (the layer is one of the target's), and its family."""
    family = family_for(cfg)
    qkv_bias = any(name.endswith("self_attn.q_proj.bias") for name in tensors)
    return DraftSpec(kind=MTP, qkv_bias=qkv_bias, base_model_type=str(cfg.get("model_type") or "qwen2"),
                     mtp_family=family.name, mtp_hidden_first=family.concat == HIDDEN_EMB, **common)


register(MTP, recognise=looks_mtp, reader=load_mtp_draft, spec_builder=mtp_spec)
