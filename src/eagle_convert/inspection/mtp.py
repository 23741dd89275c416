"""`inspect` of an MTP draft folder (`convert --mtp`, layout vllm or sglang): the family and layers found (checked
complete as extraction checks them), which engine serves it and how (vLLM method 'mtp'; SGLang's EAGLE algorithm over
a NextN model), where it came from (eagle_convert.json), and whether `bench`'s own runner runs it. Such a folder is
neither a target (it has no trunk, no LM head of its own by design) nor an EAGLE head, so none of their checks apply:
its position limit and RoPE are its target's by construction (engines build the layer from the target's config)."""

from __future__ import annotations

from ..checkpoint.index import Checkpoint
from ..checkpoint.open import absolute_if_local
from ..errors import EagleConvertError
from ..io.source import read_json
from ..layouts.mtp_sglang import sglang_serve
from ..layouts.mtp_vllm import vllm_serve, vllm_speculative_config
from ..mtp.draft import check_same_target
from ..mtp.locate import find_mtp

PROVENANCE = "eagle_convert.json"
SAME_EXCEPT_NEXTN = ("architectures", "num_hidden_layers")  # what SGLang's NextN layout changes in the config


def mtp_section(ckpt: Checkpoint, layout: str, path: str, target_config: dict | None) -> tuple[dict, list, list]:
    """(the report's `mtp` section, problems as (what, fix), notes) for an MTP draft folder in `layout`."""
    problems: list[tuple[str, str]] = []
    notes: list[str] = []
    path = absolute_if_local(path)  # the serve command then works from any folder
    provenance = _provenance(ckpt, notes)
    target = (provenance or {}).get("target") or "TARGET"
    section: dict = {"layout": layout, "provenance": provenance}
    try:
        layers = find_mtp(ckpt)
    except EagleConvertError as exc:
        problems.append((exc.message, exc.hint))
        layers = None
    if layers is not None:
        section.update(layers.to_dict())
        notes += layers.notes
    if target_config is not None:
        problems += _target_problems(ckpt.config, target_config, layout, path)
    section["serve"] = _serve(layout, target, path, ckpt.config, provenance)
    section["bench"] = _bench(layout, layers.family.name if layers else None)
    return section, problems, notes


def _serve(layout: str, target: str, path: str, config: dict, provenance: dict | None) -> dict:
    if layout == "vllm":
        return {"engine": "vllm", "method": "mtp", "speculative_config": vllm_speculative_config(path),
                "command": vllm_serve(target, path)}
    # A NextN folder dequantized from a block-FP8 target states no quantization of its own: SGLang must build the
    # draft unquantized (the flag sglang_serve adds), not with the target's FP8.
    dequantized = bool(provenance and provenance.get("fp8_block")) and "quantization_config" not in config
    return {"engine": "sglang", "method": "EAGLE (NextN)", "command": sglang_serve(target, path, dequantized)}


def _bench(layout: str, family: str | None) -> str:
    """Whether `bench`'s own runner runs this folder, by the runner's own family list (runner/mtp_head.py)."""
    from ..runner.mtp_head import RUNNER_MTP_FAMILIES

    if layout != "vllm":
        return ("no: the bench runner and vLLM read the vllm layout; extract with --to vllm to bench, or serve this "
                "folder in SGLang")
    if family in RUNNER_MTP_FAMILIES:
        return "yes, as a draft: eagle-convert bench --target TARGET --draft THIS_FOLDER (or --engine vllm)"
    return f"no ({family} MTP layers run only in an engine): eagle-convert bench --target TARGET --draft " \
           "THIS_FOLDER --engine vllm"


def _target_problems(config: dict, target_config: dict, layout: str, path: str) -> list[tuple[str, str]]:
    """An MTP layer is built from its target's config: with --target, a folder of another target is a problem."""
    if layout == "sglang":  # SGLang's layout renames the architecture and counts the one layer; the rest is kept
        config = {**config, **{k: target_config.get(k) for k in SAME_EXCEPT_NEXTN}}
    try:
        check_same_target(config, target_config, path)
    except EagleConvertError as exc:
        return [(exc.message, exc.hint)]
    return []


def _provenance(ckpt: Checkpoint, notes: list[str]) -> dict | None:
    """What eagle_convert.json records of the extraction: the tool, its version, the layout and the target."""
    if PROVENANCE not in ckpt.source.files():
        notes.append(f"no {PROVENANCE}: this folder was not written by eagle-convert (SGLang's export script writes "
                     "the NextN layout too), so where its layer came from is not recorded")
        return None
    record = read_json(ckpt.source, PROVENANCE)
    source = _dict(_dict(record.get("inputs")).get("target"))
    return {"tool": record.get("tool"), "version": record.get("version"), "layout": record.get("layout"),
            "target": source.get("repo_id") or source.get("path"), "commit_sha": source.get("commit_sha"),
            "fp8_block": _dict(record.get("mtp")).get("fp8_block")}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}  # a hand-edited record: what is not a mapping says nothing
