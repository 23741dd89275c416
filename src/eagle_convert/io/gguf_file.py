"""GGUF v3, the file format llama.cpp loads: written and read back here, from the format's specification
(ggml-org/ggml docs/gguf.md), with no dependency beyond torch (io/gguf_header.py parses the key/value section).

A file is: the magic `GGUF`, version 3, the tensor count and the key/value count (u64), the key/value pairs (a key is
a u64-length-prefixed UTF-8 string, then a u32 value type and the value; an array is its element type (u32), its
length (u64) and the elements), one info per tensor (name, dimension count (u32), dimensions (u64, innermost first:
numpy's shape reversed), ggml type (u32), offset of its data (u64, relative to the data section)), padding to the
alignment (`general.alignment`, 32 when absent), then each tensor's data, each starting on the alignment. Everything
is little-endian.

Metadata values are given as (type name, value) with the specification's type names ("UINT32", "STRING", ...) and
"ARRAY[ELEMENT]" for arrays, so a layout can state them without importing this module."""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UnsupportedConversionError, VerificationError
from .gguf_header import ARRAY, MAGIC, SCALARS, STRING, read_header

VERSION, ALIGNMENT = 3, 32

# ggml_type codes (ggml.h) of the unquantized tensor types, and their torch dtypes
GGML_TYPES = {torch.float32: 0, torch.float16: 1, torch.int8: 24, torch.int16: 25, torch.int32: 26,
              torch.int64: 27, torch.float64: 28, torch.bfloat16: 30}
GGML_DTYPES = {code: dtype for dtype, code in GGML_TYPES.items()}


@dataclass(frozen=True)
class GgufTensor:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]  # numpy/torch order (outermost first); the file stores it reversed

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(type_name: str, value) -> bytes:
    """The type code and bytes of one metadata value."""
    if type_name == "STRING":
        return struct.pack("<I", STRING) + _string(value)
    if type_name.startswith("ARRAY[") and type_name.endswith("]"):
        element = type_name[len("ARRAY["):-1]
        items = b"".join(_value(element, v)[4:] for v in value)  # elements carry no type code of their own
        code = STRING if element == "STRING" else SCALARS[element][0]
        return struct.pack("<IIQ", ARRAY, code, len(value)) + items
    code, fmt = SCALARS[type_name]
    return struct.pack(f"<I{fmt}", code, value)


def _padding(n: int, alignment: int) -> int:
    return -n % alignment


def _metadata_bytes(metadata: dict[str, tuple[str, object]]) -> list[bytes]:
    """Each key/value pair encoded; a value its type cannot hold (a negative UINT32 read from a damaged config, a
    float past float32) is refused naming every such key, before a byte is written."""
    parts, unfit = [], []
    for key, (type_name, value) in metadata.items():
        try:
            parts.append(_string(key) + _value(type_name, value))
        except (struct.error, OverflowError, TypeError, ValueError):
            unfit.append(f"{key} = {value!r} ({type_name})")
    if unfit:
        raise UnsupportedConversionError(
            f"The head's config gives GGUF keys values their types cannot hold: {'; '.join(unfit)}.",
            "Correct those values in the draft's config.json (copy them from the model the head was trained for).")
    return parts


def header_bytes(metadata: dict[str, tuple[str, object]], tensors: list[GgufTensor]) -> tuple[bytes, list[int]]:
    """The header up to the data section (padded), and each tensor's offset in the data section."""
    parts = [MAGIC, struct.pack("<IQQ", VERSION, len(tensors), len(metadata)), *_metadata_bytes(metadata)]
    offsets, offset = [], 0
    for t in tensors:
        if t.dtype not in GGML_TYPES:
            raise ValueError(f"{t.name}: no unquantized GGUF type for {t.dtype}")
        dims = tuple(reversed(t.shape))
        parts.append(_string(t.name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, GGML_TYPES[t.dtype], offset))
        offsets.append(offset)
        offset += t.nbytes + _padding(t.nbytes, ALIGNMENT)
    head = b"".join(parts)
    return head + b"\0" * _padding(len(head), ALIGNMENT), offsets


def write_gguf(path: Path, metadata: dict[str, tuple[str, object]], tensors: list[GgufTensor],
               produce: Callable[[GgufTensor], torch.Tensor],
               on_nonfinite: Callable[[GgufTensor, torch.Tensor, int], None] | None = None) -> None:
    """Write a GGUF file: `produce` gives each tensor (in its planned shape; a float tensor in any float dtype, cast
    here), one at a time. Then the file is read back with `read_gguf` and every tensor compared byte for byte with
    what was produced, so a writer bug or a damaged disk never passes in silence. A float tensor holding NaN/Inf is
    passed, with the count, to `on_nonfinite` (which may raise)."""
    head, offsets = header_bytes(metadata, tensors)
    written: dict[str, bytes] = {}
    with open(path, "wb") as f:
        f.write(head)
        for t, offset in zip(tensors, offsets):
            data = _cast(t, produce(t))
            if t.dtype.is_floating_point and on_nonfinite is not None:
                bad = int(data.numel() - int(torch.isfinite(data.float()).sum()))
                if bad:
                    on_nonfinite(t, data, bad)
            raw = data.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            assert f.tell() == len(head) + offset  # the offsets in the header are where the data lands
            f.write(raw + b"\0" * _padding(len(raw), ALIGNMENT))
            written[t.name] = raw
    _verify(path, metadata, written)


def _cast(t: GgufTensor, value: torch.Tensor) -> torch.Tensor:
    if tuple(value.shape) != t.shape or not (value.dtype == t.dtype or (
            value.dtype.is_floating_point and t.dtype.is_floating_point)):
        raise AssertionError(f"{t.name}: produced {value.dtype} {tuple(value.shape)}, planned {t.dtype} {t.shape}")
    return value.to(t.dtype)


def _verify(path: Path, metadata: dict, written: dict[str, bytes]) -> None:
    back = read_gguf(path)
    # values compared as encoded: a FLOAT32 reads back rounded to float32
    same_metadata = list(back.metadata) == list(metadata) and all(
        back.types[key] == type_name and _value(type_name, back.metadata[key]) == _value(type_name, value)
        for key, (type_name, value) in metadata.items())
    if not same_metadata or list(back.tensors) != list(written) or \
            any(back.raw(name) != raw for name, raw in written.items()):
        raise VerificationError(f"{path.name} does not read back as written.",
                                "The disk or filesystem corrupted the output; check free space and retry.")


@dataclass
class GgufFile:
    """A GGUF file read back: its version, metadata (key -> value), value types (key -> type name, arrays as
    "ARRAY[ELEMENT]"), tensors (name -> (dtype, shape, absolute offset)) and its bytes."""
    version: int
    metadata: dict[str, object]
    types: dict[str, str]
    tensors: dict[str, tuple[torch.dtype, tuple[int, ...], int]]
    data: bytes

    def raw(self, name: str) -> bytes:
        dtype, shape, offset = self.tensors[name]
        return self.data[offset:offset + math.prod(shape) * dtype.itemsize]

    def tensor(self, name: str) -> torch.Tensor:
        dtype, shape, _ = self.tensors[name]
        return torch.frombuffer(bytearray(self.raw(name)), dtype=dtype).reshape(shape)


def read_gguf(path: Path) -> GgufFile:
    """Parse a GGUF v3 file (unquantized tensor types only): the files this module writes, read back whole."""
    data = Path(path).read_bytes()
    header = read_header(io.BytesIO(data), str(path), len(data))
    at, infos = header.end, []
    for _ in range(header.tensor_count):
        (n,) = struct.unpack_from("<Q", data, at)
        name, at = data[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n
        (dims,) = struct.unpack_from("<I", data, at)
        shape = tuple(reversed(struct.unpack_from(f"<{dims}Q", data, at + 4)))
        code, offset = struct.unpack_from("<IQ", data, at + 4 + 8 * dims)
        at += 4 + 8 * dims + 12
        infos.append((name, GGML_DTYPES[code], shape, offset))
    start = at + _padding(at, int(header.metadata.get("general.alignment", ALIGNMENT)))
    tensors = {name: (dtype, shape, start + offset) for name, dtype, shape, offset in infos}
    return GgufFile(header.version, header.metadata, header.types, tensors, data)
