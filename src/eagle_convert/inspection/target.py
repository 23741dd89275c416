"""`inspect TARGET`: a target checkpoint's family, where its LM head and embedding were found and how they are stored
(float, FP8 dequantized exactly, packed: refused), its quantization, and whether the bench runner can run it."""

from __future__ import annotations

from ..checkpoint.index import Checkpoint
from ..errors import EagleConvertError, ShapeMismatchError
from ..layouts.registry import detect_layout
from ..mtp.locate import describe_mtp
from ..targets import CAUSAL_LM, family_for
from ..targets.quant import quantization_summary, stored_names
from ..targets.target_info import read_target


def looks_like_target(ckpt: Checkpoint) -> bool:
    """Not a draft layout, and a known family or a CausalLM's names: inspect describes it as a target."""
    names = frozenset(ckpt.names())
    if detect_layout(ckpt.config, names)[0] is not None:
        return False
    return family_for(ckpt.config) is not None or CAUSAL_LM.lm_head in names or CAUSAL_LM.embed in names


def _stored(info, which: str) -> dict:
    name = info.embed_name if which == "embedding" else (info.lm_head_name or info.embed_name)
    held_in = next((n for n in stored_names(info.checkpoint, name)), name)  # a packed head may have no `weight`
    entry = {"name": name, "file": info.checkpoint.file_of(held_in), "tied": which == "lm_head" and
             info.lm_head_name is None}
    try:
        stored = info.embedding_weight() if which == "embedding" else info.lm_head_weight()
    except EagleConvertError as exc:
        what = "shape disagrees with the config (refused)" if isinstance(exc, ShapeMismatchError) else \
            "packed (refused)"
        return {**entry, "stored": what, "dtype": None, "shape": None, "refusal": exc.message, "fix": exc.hint}
    return {**entry, "dtype": str(stored.ref.dtype).removeprefix("torch."), "shape": list(stored.ref.shape),
            "stored": f"fp8 {stored.scheme}, scale {stored.scale.name} (dequantized exactly)" if stored.quantized
            else "float (copied)"}


def describe_target(ckpt: Checkpoint) -> tuple[dict, list[tuple[str, str]]]:
    """(the target section of the inspect report, problems as (what, fix))."""
    family = family_for(ckpt.config)
    problems: list[tuple[str, str]] = []
    report = {"family": family.name if family else None,
              "architectures": ckpt.config.get("architectures"),
              "multimodal": bool(family and family.multimodal),
              "rope": family.rope if family else None,
              "quantization": quantization_summary(ckpt.config), "mtp": describe_mtp(ckpt)}
    if family is None:
        problems.append((f"model_type {ckpt.config.get('model_type')!r} is not a known target family.",
                         "convert still works when the CausalLM names are present; otherwise pass "
                         "--target-lm-head NAME and --target-embed NAME."))
    try:
        info = read_target(ckpt)
    except EagleConvertError as exc:
        problems.append((exc.message, exc.hint))
        return {**report, "bench": _bench(ckpt)}, problems
    report.update(sizes_in=family.text_config if family and family.sizes_config(ckpt.config) is not ckpt.config
                  else "config", hidden_size=info.hidden_size, vocab_size=info.vocab_size,
                  num_hidden_layers=info.num_hidden_layers, tie_word_embeddings=info.tied, found_by=info.found_by,
                  lm_head=_stored(info, "lm_head"), embedding=_stored(info, "embedding"), bench=_bench(ckpt))
    for which in ("lm_head", "embedding"):
        if "refusal" in report[which]:
            problems.append((report[which]["refusal"], report[which]["fix"]))
    return report, problems


def _bench(ckpt: Checkpoint) -> str:
    """The bench runner's verdict, from the check `bench` itself makes (runner_target): never a copy of it."""
    from ..runner.text_model import runner_target

    try:
        view = runner_target(ckpt)
    except EagleConvertError as exc:
        return f"no: {exc.message} {exc.hint}"
    if view.family is None:
        return "unknown family: the runner tries it as a Llama-family CausalLM"
    return "yes, text-only (its language model)" if view.text_only else "yes"
