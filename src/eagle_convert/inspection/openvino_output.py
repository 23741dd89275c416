"""`inspect` of a folder `convert --to openvino` wrote: an OpenVINO IR holds no safetensors, so the folder is read
through the provenance eagle-convert wrote beside it (layout, every tensor exported, the rt_info read back from the
saved IR), and its taps from rt_info `hidden_layers_list` (GenAI's count: the output of layer i). An IR eagle-convert
did not write is OpenVINO's to read; inspect names the checkpoint to look at instead."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import LayoutError
from ..io.text import read_text
from ..taps.conventions import CONVENTIONS, describe_taps, taps_line
from .gguf_output import PROVENANCE, tensors_of

IR = "openvino_model.xml"


def openvino_output(path: str) -> dict | None:
    """The provenance of an OpenVINO IR output folder, or None when PATH holds no IR."""
    folder = Path(path)
    if not folder.is_dir() or not (folder / IR).is_file():
        return None
    try:
        provenance = json.loads(read_text(folder / PROVENANCE)) if (folder / PROVENANCE).is_file() else None
    except (ValueError, RecursionError):
        provenance = None
    if not isinstance(provenance, dict) or provenance.get("layout") != "openvino" or "ir_export" not in provenance:
        raise LayoutError(
            f"{path} holds an OpenVINO IR ({IR}) but no eagle-convert provenance ({PROVENANCE}) of an openvino "
            "conversion: it is OpenVINO's format, which eagle-convert writes but does not read.",
            "Inspect the Hugging Face checkpoint it was made from, or convert that checkpoint with `--to openvino`, "
            "which records what it wrote (its rt_info hidden_layers_list among it).")
    return provenance


def openvino_taps(provenance: dict) -> dict | None:
    """The taps the IR states (rt_info hidden_layers_list, read back from the saved IR at conversion)."""
    row = CONVENTIONS["openvino"]
    stored = (provenance["ir_export"].get("rt_info") or {}).get(row.key)
    if not isinstance(stored, list):
        return None
    taps = describe_taps(row.to_internal(stored), row.name)
    return {**taps, "line": taps_line(taps)}


def openvino_tensors(provenance: dict) -> list[dict]:
    return tensors_of(provenance, "openvino_model.bin")
