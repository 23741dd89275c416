"""Find a target's MTP layers and check them complete, reading only names and safetensors headers (no tensor bytes):
the index's names, plus every top-level `.safetensors` file the index does not list (a release whose MTP shard was
left out of the index, SGLang PR #17166: found and used, with a note). Everything the config implies must be there,
every FP8 weight with a scale of the right block shape; look-alikes (DSpark), configs that promise MTP layers no file
holds, `num_nextn_predict_layers: 0` and quantization formats this check does not understand are refused by name."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..checkpoint.index import Checkpoint, TensorRef, parse_safetensors_header
from ..errors import EagleConvertError, LayoutError, MissingTensorError, ShapeMismatchError, UnsupportedConversionError
from ..families import BY_NAME, refuse_family
from ..targets.quant import FP8_DTYPES, PACKED_SUFFIXES, block_size_of
from .bounds import check_counts
from .families import DSPARK_MODEL_TYPES, DSPARK_NAMES, PROMISE_KEYS, MtpFamily, family_for, family_names, text_config
from .folder import extracted_layout, mtp_owner
from .signature import config_int, declared_layers, expected_names, trunk_layers

SCALE_SUFFIX = "_scale_inv"  # DeepSeek-style block FP8: `<name>.weight_scale_inv` beside `<name>.weight`
SHOWN = 6  # names listed in a refusal


@dataclass
class MtpLayers:
    """The MTP layers of one target, complete and checked: what extraction reads."""
    family: MtpFamily
    count_key: str
    count: int
    trunk_layers: int
    refs: dict[str, TensorRef]  # every tensor extracted (incl. FP8 scales and any embedding / head copies), by name
    copies: tuple[str, ...]  # the embedding / head copies among them
    scales: dict[str, str]  # FP8 weight -> its scale
    block: tuple[int, int] | None  # FP8 block size
    notes: list[str] = field(default_factory=list)

    @property
    def quantized(self) -> bool:
        return bool(self.scales)

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.refs.values())

    def dtypes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.refs.values():
            key = str(r.dtype).removeprefix("torch.")
            counts[key] = counts.get(key, 0) + 1
        return counts

    def files(self) -> list[str]:
        return sorted({r.file for r in self.refs.values()})

    def to_dict(self) -> dict:
        """As inspect and convert report them."""
        return {"family": self.family.name, "title": self.family.title, "layers": self.count,
                "count_key": self.count_key, "tensors": len(self.refs), "bytes": self.nbytes, "dtypes": self.dtypes(),
                "files": self.files(), "concat": self.family.concat, "copies": list(self.copies),
                "fp8_block": list(self.block) if self.block else None, "notes": list(self.notes)}


def describe_mtp(ckpt: Checkpoint) -> dict:
    """inspect's view: the MTP layers found (to_dict), or why there are none / why they would be refused. A target
    that neither belongs to an MTP family nor promises MTP layers costs no read."""
    if family_for(ckpt.config) is None and not any(ckpt.config.get(k) for k in PROMISE_KEYS):
        return {"found": False, "why": "not an MTP family, and the config promises no MTP layers"}
    try:
        return {"found": True, **find_mtp(ckpt).to_dict()}
    except EagleConvertError as exc:
        return {"found": False, "why": exc.message, "fix": exc.hint}


def _shown(names) -> str:
    names = sorted(names)
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def all_refs(ckpt: Checkpoint) -> tuple[dict[str, str], dict[str, TensorRef], list[str]]:
    """(name -> file from the index, or the single file's header; refs of tensors in top-level safetensors files the
    index does not list; those files). An unlisted file's header is read (a small byte range), never its data."""
    listed = {name: ckpt.file_of(name) for name in ckpt.names()}
    known = set(ckpt.files)
    unlisted = [f for f in ckpt.source.files() if f.endswith(".safetensors") and "/" not in f and f not in known]
    extra: dict[str, TensorRef] = {}
    for rel in unlisted:
        for name, ref in parse_safetensors_header(ckpt.source, rel).items():
            if name not in listed:
                extra.setdefault(name, ref)
    return listed, extra, unlisted


def _refuse_lookalikes(config: dict, names) -> None:
    dspark = sorted(n for n in names if DSPARK_NAMES.search(n))
    if config.get("model_type") in DSPARK_MODEL_TYPES or dspark:
        why = f"model_type {config.get('model_type')!r}" if not dspark else f"tensors {_shown(dspark)}"
        raise UnsupportedConversionError(
            f"This checkpoint's draft under the MTP prefix is DeepSeek-V4.1's DSpark drafter ({why}), not classic "
            "MTP layers: it has main_proj / markov_head / confidence_head stages and no eh_proj / enorm / hnorm.",
            f"Serve it as it is with {', '.join(BY_NAME['dspark-deepseek-v4'].engines)}; eagle-convert "
            "extracts classic MTP layers only.")


def _no_family(config: dict, names) -> LayoutError:
    promised = {k: config.get(k) for k in PROMISE_KEYS if config.get(k) not in (None, 0, False)}
    if promised and not any("mtp" in n or "nextn" in n for n in names):
        return LayoutError(
            f"The config promises MTP layers ({', '.join(f'{k}: {v}' for k, v in promised.items())}) but no tensor "
            "holds them (MiniMax-M2.x releases ship such configs without MTP weights).",
            "There is no MTP head to extract: use another draft (an EAGLE head) or a release that ships the MTP "
            "weights.")
    archs = ", ".join(config.get("architectures") or []) or "no architectures"
    return LayoutError(
        f"model_type {config.get('model_type')!r} ({archs}) is not a known MTP family (known: {family_names()}).",
        "eagle-convert extracts the MTP layers of the families in docs/mtp.md; for another family, report its "
        "tensor names and config.")


def _check_count(family: MtpFamily, key: str | None, count: int, area: list[str]) -> None:
    if count:
        return
    found = f"; the checkpoint holds {len(area)} tensor(s) under the MTP prefix ({_shown(area)})" if area else ""
    said = f"{key}: 0" if key else f"no {' / '.join(PROMISE_KEYS[:2])}"
    raise LayoutError(f"The {family.title} config declares no MTP layers ({said}){found}.",
                      "Nothing to extract: the release has no MTP head, or its config.json was edited; restore "
                      f"{key or PROMISE_KEYS[0]} from the original release if the weights are there.")


def _check_quantization(config: dict, area: list[str], whose: str) -> tuple[int, int] | None:
    """The FP8 block of a block-FP8 target, None when unquantized; any other format is refused."""
    packed = [n for n in area if n.endswith(PACKED_SUFFIXES)]
    q = config.get("quantization_config")
    method = q.get("quant_method") if isinstance(q, dict) else None
    if packed or (q is not None and method != "fp8"):
        why = f"tensors {_shown(packed)}" if packed else f"quant_method {method!r}"
        raise UnsupportedConversionError(
            f"{whose} MTP layers are stored in a quantization format eagle-convert does not check ({why}): "
            "only unquantized layers and DeepSeek-style block FP8 (e4m3 weights with weight_scale_inv) are "
            "checked complete.", "Extract from the unquantized (or block-FP8) release of the model.")
    if method is None:
        return None
    block = block_size_of(config)
    if block is None or q.get("scale_fmt") not in (None, "e4m3", "float32"):
        raise UnsupportedConversionError(
            f"{whose} FP8 quantization_config has weight_block_size {q.get('weight_block_size')!r} and "
            f"scale_fmt {q.get('scale_fmt')!r}: only float32 block scales of a stated block size are checked.",
            "Extract from a release with DeepSeek-V3-style FP8 (weight_block_size [128, 128], fp32 scales).")
    return block


def _check_scales(refs: dict[str, TensorRef], block: tuple[int, int] | None, names: set[str],
                  whose: str) -> dict[str, str]:
    """FP8 weight -> scale, each scale of shape [ceil(rows / b0), ceil(cols / b1)]."""
    scales, bad = {}, []
    for name, ref in refs.items():
        if ref.dtype not in FP8_DTYPES:
            continue
        scale = name + SCALE_SUFFIX
        if block is None:
            bad.append(f"{name} is {str(ref.dtype).removeprefix('torch.')} but the config declares no FP8 "
                       "quantization_config")
        elif scale not in names:
            bad.append(f"{name} has no {scale}")
        else:
            want = tuple(-(-d // b) for d, b in zip(ref.shape, block))
            got = refs[scale].shape
            if got != want or refs[scale].dtype != torch.float32:
                bad.append(f"{scale} is {str(refs[scale].dtype).removeprefix('torch.')} {list(got)}, a "
                           f"{block[0]}x{block[1]}-block scale of {list(ref.shape)} is float32 {list(want)}")
            scales[name] = scale
    if bad:
        raise MissingTensorError(f"{whose} FP8 MTP weights are incomplete: {'; '.join(bad[:SHOWN])}.",
                                 "Every FP8 weight needs its block scale; the checkpoint is damaged or was exported "
                                 "without them: use an intact copy of the release.")
    return scales


def _check_own_shapes(family: MtpFamily, config: dict, refs: dict[str, TensorRef], trunk_layers: int,
                      count: int, whose: str) -> None:
    """The fusion projection is [hidden, 2 x hidden] and the MTP norms [hidden]: a layer of another model's sizes (or
    another drafter under the same names) is refused before any byte is read."""
    h = config_int(text_config(config), "hidden_size", 0)
    for i in range(count):
        fill = {"L": family.layer_index(i, trunk_layers), "n": trunk_layers}
        fusion, *norms = (t.format(**fill) for t in family.own)
        wrong = [f"{n} is {list(refs[n].shape)}, not {list(want)}" for n, want in
                 [(fusion, (h, 2 * h))] + [(n, (h,)) for n in norms] if tuple(refs[n].shape) != want]
        if wrong:
            raise ShapeMismatchError(
                f"{whose} {family.title} MTP layer does not fit its config (hidden_size {h}): "
                f"{'; '.join(wrong)}.", "The config and the MTP weights come from different models: use the "
                "release's own config.json and weights together.")


def find_mtp(ckpt: Checkpoint) -> MtpLayers:
    """The target's MTP layers, complete, or a refusal that names what is wrong."""
    config = ckpt.config
    listed, extra, unlisted = all_refs(ckpt)
    names = set(listed) | set(extra)
    _refuse_lookalikes(config, names)
    family = family_for(config)
    if family is None:
        refuse_family(config, names, ckpt.label)  # a late-2026 MTP family with no row here: refused by name
        raise _no_family(config, names)
    trunk = trunk_layers(family, config)
    whose = mtp_owner(config, names, ckpt.label)
    area = sorted(n for n in names if family.in_area(n, trunk))
    key, count = declared_layers(config)
    _check_count(family, key, count, area)
    if not area:
        raise LayoutError(
            f"The {family.title} config promises {count} MTP layer(s) ({key}: {count}) but no file holds a tensor "
            f"under its MTP prefix ({family.block.format(L=family.layer_index(0, trunk))}...).",
            "The release (or its quantized export) dropped the MTP weights: use a release that ships them, e.g. the "
            "original BF16 or FP8 checkpoint.")
    check_counts(family, config, key, count, trunk, area, whose)  # before the loops below run over the counts
    block = _check_quantization(config, area, whose)
    required, optional = [], []
    for i in range(count):
        req, opt = expected_names(family, config, i)
        required += [n for n in req if n not in required]
        optional += [n for n in opt if n not in optional]
    wanted = set(required) | {n for n in optional if n in names}
    scales = {n + SCALE_SUFFIX for n in wanted if n + SCALE_SUFFIX in names}
    unexpected = [n for n in area if n not in wanted | scales]
    if unexpected:
        raise LayoutError(
            f"The {family.title} MTP prefix holds tensors its MTP layer does not have: {_shown(unexpected)} "
            f"({key}: {count}). This is another drafter or a differently built layer under the same names, "
            "not the MTP layer the config describes.",
            f"Check {key} and the model's release notes; eagle-convert extracts only the layers it can check "
            "complete.")
    missing = [n for n in required if n not in names]
    if missing:
        raise MissingTensorError(
            f"{whose} {family.title} MTP layers are incomplete: {len(missing)} of the {len(required)} tensors "
            f"its config implies are missing ({_shown(missing)}).",
            "vLLM would load such a layer without an error and draft with garbage: " + (
                "extract it again from an intact target (`eagle-convert convert --mtp TARGET -o DIR` checks the "
                "layer complete before writing it)." if whose != "The target's" else "use an intact copy of the "
                "release (a quantized export may have dropped part of the MTP layer)."))
    refs = {n: (ckpt.ref(n) if n in listed else extra[n]) for n in sorted(wanted | scales)}
    _check_own_shapes(family, config, refs, trunk, count, whose)
    fp8_scales = _check_scales(refs, block, set(refs), whose)
    notes = [f"{rel} holds MTP tensors but model.safetensors.index.json does not list it: read from it anyway"
             for rel in unlisted if any(r.file == rel for r in refs.values())]
    copies = tuple(n for n in optional if n in refs)
    if family.copies and not copies and extracted_layout(config, names) != "sglang":  # SGLang's drops them
        notes.append("the MTP layer carries no embedding / head copies (as GLM-4.6 ships): engines use the "
                     "target's own")
    return MtpLayers(family, key, count, trunk, refs, copies, fp8_scales, block, notes)
