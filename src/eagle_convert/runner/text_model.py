"""What the bench runner runs of a target checkpoint, from its family's table (targets/): a text-only CausalLM as
saved; a multimodal wrapper text-only, through its language model (its text config, its tensors under their prefix);
any family the runner does not implement refused, naming the engine bench as the way to measure it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..checkpoint.index import Checkpoint
from ..errors import UnsupportedModelError
from ..targets import TargetFamily, family_for
from ..targets.quant import quantization_summary
from ..targets.target_info import find_names
from .architectures import runner_families_line

_MROPE_KEYS = ("mrope_section", "mrope_interleaved")


@dataclass(frozen=True)
class RunnerTarget:
    config: dict  # what runner/model.py reads: the text model's config, model_type the text family's
    saved_name: Callable[[str], str]  # runner name (model.layers.0..., lm_head.weight) -> the checkpoint's name
    family: TargetFamily | None
    text_only: bool  # a multimodal checkpoint run through its language model alone


def runner_target(ckpt: Checkpoint) -> RunnerTarget:
    family = family_for(ckpt.config)
    if family is not None and family.runner is None:
        raise UnsupportedModelError(
            f"The bench runner does not implement {family.name} targets"
            f"{f' ({family.note})' if family.note else ''}; convert supports them.",
            "Bench this target with an engine: `eagle-convert bench --engine vllm` (the runner implements "
            f"{runner_families_line()}).")
    method = quantization_summary(ckpt.config)
    if method:  # its weights are codes: cast to float without their scales they would run as garbage, silently
        raise UnsupportedModelError(
            f"The bench runner runs unquantized targets; {ckpt.label} is quantized ({method}).",
            "Bench the unquantized base it was made from (then say that τ was measured on the bf16 sibling), or "
            "bench the quantized target with an engine: `eagle-convert bench --engine vllm`.")
    if family is None or not family.multimodal or not family.runner_model_type:
        return RunnerTarget(ckpt.config, lambda name: name, family, False)
    top = ckpt.config
    text = {k: v for k, v in family.sizes_config(top).items() if k not in ("architectures", "text_config",
                                                                           "vision_config")}
    text["model_type"] = family.runner_model_type
    text.setdefault("tie_word_embeddings", top.get("tie_word_embeddings", False))
    for key in ("rope_scaling", "rope_parameters"):  # text-only, mrope's three position streams are one: plain RoPE
        params = text.get(key)
        if isinstance(params, dict) and any(k in params for k in _MROPE_KEYS):
            text[key] = {k: v for k, v in params.items() if k not in _MROPE_KEYS + ("type",)} | {"rope_type": "default"}
    embed, head, _ = find_names(ckpt, family, bool(text["tie_word_embeddings"]))
    prefix = embed.removesuffix("embed_tokens.weight")

    def saved_name(name: str) -> str:
        if name == "lm_head.weight":
            return head or embed
        return prefix + name.removeprefix("model.") if name.startswith("model.") else name

    return RunnerTarget(text, saved_name, family, True)
