"""GGUF v3, the file format llama.cpp loads: written and read back here, from the format's specification
(ggml-org/ggml docs/gguf.md), with no dependency beyond numpy and torch.

A file is: the magic `GGUF`, version 3, the tensor count and the key/value count (u64), the key/value pairs (a key is
a u64-length-prefixed UTF-8 string, then a u32 value type and the value; an array is its element type (u32), its
length (u64) and the elements), one info per tensor (name, dimension count (u32), dimensions (u64, innermost first:
numpy's shape reversed), ggml type (u32), offset of its data (u64, relative to the data section)), padding to the
alignment (`general.alignment`, 32 when absent), then each tensor's data, each starting on the alignment. Everything
is little-endian.

Metadata values are given as (type name, value) with the specification's type names ("UINT32", "STRING", ...) and
"ARRAY[ELEMENT]" for arrays, so a layout can state them without importing this module."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy
import torch

from ..errors import UnsupportedConversionError, VerificationError

MAGIC, VERSION, ALIGNMENT = b"GGUF", 3, 32

# gguf.md "gguf_metadata_value_type": code and struct format of each scalar type
SCALARS = {"UINT8": (0, "B"), "INT8": (1, "b"), "UINT16": (2, "H"), "INT16": (3, "h"), "UINT32": (4, "I"),
           "INT32": (5, "i"), "FLOAT32": (6, "f"), "BOOL": (7, "?"), "UINT64": (10, "Q"), "INT64": (11, "q"),
           "FLOAT64": (12, "d")}
STRING, ARRAY = 8, 9
TYPE_NAMES = {code: name for name, (code, _) in SCALARS.items()} | {STRING: "STRING", ARRAY: "ARRAY"}

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


class _Cursor:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str:
        n = self.take("Q")
        self.at += n
        return self.data[self.at - n:self.at].decode("utf-8")

    def value(self, code: int):
        if code == STRING:
            return self.string(), "STRING"
        if code == ARRAY:
            element, count = self.take("IQ")
            items = [self.value(element)[0] for _ in range(count)]
            return items, f"ARRAY[{TYPE_NAMES[element]}]"
        name = TYPE_NAMES[code]
        return self.take(SCALARS[name][1]), name


def read_gguf(path: Path) -> GgufFile:
    """Parse a GGUF v3 file (unquantized tensor types only)."""
    data = Path(path).read_bytes()
    if data[:4] != MAGIC:
        raise ValueError(f"{path}: not a GGUF file (magic {data[:4]!r})")
    c = _Cursor(data)
    c.at = 4
    version, n_tensors, n_kv = c.take("IQQ")
    metadata, types = {}, {}
    for _ in range(n_kv):
        key = c.string()
        metadata[key], types[key] = c.value(c.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        dims = c.take("I")
        shape = tuple(reversed(numpy.atleast_1d(c.take(f"{dims}Q")).tolist()))
        code, offset = c.take("IQ")
        infos.append((name, GGML_DTYPES[code], shape, offset))
    start = c.at + _padding(c.at, int(metadata.get("general.alignment", ALIGNMENT)))
    tensors = {name: (dtype, shape, start + offset) for name, dtype, shape, offset in infos}
    return GgufFile(version, metadata, types, tensors, data)
