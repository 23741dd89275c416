"""`inspect` of a folder `convert --to gguf` wrote: a llama.cpp draft GGUF holds no config.json, so the folder is
read through the provenance eagle-convert wrote beside it (layout, every tensor's dtype, shape and source). A GGUF
eagle-convert did not write is llama.cpp's to read; inspect names the checkpoint to look at instead."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..errors import CorruptCheckpointError, LayoutError
from ..io.gguf_header import read_header_of
from ..io.text import read_text
from ..kinds import DFLASH, EAGLE3
from ..layouts import LAYOUTS

PROVENANCE = "eagle_convert.json"
KIND_OF_ARCHITECTURE = {"eagle3": EAGLE3, "dflash": DFLASH}  # general.architecture -> head kind (layouts/gguf*.py)


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


def gguf_head(path: str) -> tuple[str, str | None]:
    """(file name, head kind) of the GGUF file eagle-convert wrote in PATH, the kind read from the file's own
    `general.architecture` (the first key eagle-convert writes), never from its name. Kind None: not one of ours."""
    for file in sorted(Path(path).glob("*.gguf")):
        arch = _first_string_key(file, "general.architecture")
        if arch in KIND_OF_ARCHITECTURE:
            return file.name, KIND_OF_ARCHITECTURE[arch]
    return "?", None


def _first_string_key(file: Path, key: str) -> str | None:
    """The value of the header's first key when it is `key` with a string value (GGUF v3: magic, version, tensor and
    key counts, then key = [u64 length, bytes], u32 type (8: string), value = [u64 length, bytes])."""
    with file.open("rb") as f:
        head = f.read(24 + 8 + len(key) + 4 + 8)
        if len(head) < 24 or head[:4] != b"GGUF":
            return None
        (n,) = struct.unpack_from("<Q", head, 24)
        if n != len(key) or head[32:32 + n] != key.encode() or struct.unpack_from("<I", head, 32 + n)[0] != 8:
            return None
        (length,) = struct.unpack_from("<Q", head, 36 + n)
        return f.read(min(length, 256)).decode("utf-8", "replace")


def vocabulary_problems(path: str, file_name: str, kind: str | None) -> list[tuple[str, str]]:
    """(problem, fix) when the DFlash GGUF in PATH holds no vocabulary: llama.cpp reads its mask token through one
    (layouts/gguf_dflash.py) and aborts at the first draft without it. Read from the file's own header."""
    if kind != DFLASH:
        return []
    file = Path(path) / file_name
    try:
        model = read_header_of(file).metadata.get("tokenizer.ggml.model")
    except CorruptCheckpointError as exc:
        return [(exc.message, exc.hint)]
    if model not in (None, "none"):
        return []
    return [(f"{file_name} holds no vocabulary (tokenizer.ggml.model = none): llama.cpp cannot run this DFlash draft "
             "(it aborts at the first draft, \"failed to add token\").",
             "Convert the head again with --target-gguf TARGET.gguf, the target's GGUF that llama-server loads with "
             "-m: its tokenizer.* keys are copied into the draft.")]
