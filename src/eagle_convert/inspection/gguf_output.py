"""`inspect` of a folder `convert --to gguf` wrote: a llama.cpp draft GGUF holds no config.json, so the folder is
read through the provenance eagle-convert wrote beside it (layout, every tensor's dtype, shape and source). A GGUF
eagle-convert did not write is llama.cpp's to read; inspect names the checkpoint to look at instead."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import LayoutError
from ..io.text import read_text
from ..layouts import LAYOUTS

PROVENANCE = "eagle_convert.json"


def gguf_output(path: str) -> dict | None:
    """The provenance of a GGUF output folder, or None when PATH is not a folder of GGUF files without a config."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "config.json").exists() or not any(folder.glob("*.gguf")):
        return None
    record = folder / PROVENANCE
    layout = None
    if record.is_file():
        try:
            provenance = json.loads(read_text(record))
        except (ValueError, RecursionError):
            provenance = None
        layout = LAYOUTS.get(provenance.get("layout")) if isinstance(provenance, dict) else None
    if layout is None or not getattr(layout, "gguf_file", None):
        raise LayoutError(
            f"{path} holds GGUF files but no config.json and no eagle-convert provenance ({PROVENANCE}) naming a GGUF "
            "layout: it is llama.cpp's format, which eagle-convert writes but does not read.",
            "Inspect the Hugging Face checkpoint it was made from, or convert that checkpoint with `--to gguf`, "
            "which records what it wrote.")
    return provenance


def tensors_of(provenance: dict, file_name: str) -> list[dict]:
    return [{"name": name, "shape": list(record.get("shape") or []), "dtype": str(record.get("dtype", "?")),
             "file": file_name} for name, record in (provenance.get("tensors") or {}).items()]
