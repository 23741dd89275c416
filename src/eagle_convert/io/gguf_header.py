"""The key/value section of a GGUF file, streamed from a file handle: what `--target-gguf` reads from a target's GGUF
(its vocabulary), and what io/gguf_file.py parses its own files' metadata with.

A target GGUF is many GB and usually quantized: this reads the magic, the version, the two counts and the key/value
pairs, and stops there, so tensor data is never read and tensor types (known or not) never matter. Everything a
damaged file could make huge is checked against the bytes left in the file before it is read or allocated (a string's
length, an array's count, the key count), so garbage gives a CorruptCheckpointError naming the file and the offset,
never a MemoryError or a traceback. Layout (ggml docs/gguf.md): magic `GGUF`, version (u32; 2 and 3 share this
layout), tensor count and key count (u64), then per key a u64-length-prefixed UTF-8 name, a u32 value type and the
value (an array: element type u32, count u64, the elements). Little-endian."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import CorruptCheckpointError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 counted in u32: another layout, written by no llama.cpp since 2023
# gguf.md "gguf_metadata_value_type": code and struct format of each scalar type
SCALARS = {"UINT8": (0, "B"), "INT8": (1, "b"), "UINT16": (2, "H"), "INT16": (3, "h"), "UINT32": (4, "I"),
           "INT32": (5, "i"), "FLOAT32": (6, "f"), "BOOL": (7, "?"), "UINT64": (10, "Q"), "INT64": (11, "q"),
           "FLOAT64": (12, "d")}
STRING, ARRAY = 8, 9
TYPE_NAMES = {code: name for name, (code, _) in SCALARS.items()} | {STRING: "STRING", ARRAY: "ARRAY"}
# The fewest bytes one key/value pair takes (an empty name, a type, a one-byte value): bounds the key count.
SMALLEST_PAIR = 8 + 4 + 1
# The most elements one array may hold: the largest vocabularies and merge lists are under a million entries, while a
# damaged count inside a many-GB file could otherwise pass the size check and build a list of billions of Python ints.
MAX_ARRAY = 1 << 24


@dataclass(frozen=True)
class GgufHeader:
    """A GGUF file's header: version, tensor count, metadata (key -> value, arrays as lists), each value's type name
    ("UINT32", "STRING", arrays "ARRAY[ELEMENT]") and where the key/value section ends (the tensor infos start)."""
    version: int
    tensor_count: int
    metadata: dict[str, object]
    types: dict[str, str]
    end: int


class _Stream:
    """Reads from `f`, refusing any read past the file's end before making it."""

    def __init__(self, f: BinaryIO, size: int, label: str):
        self.f, self.size, self.label = f, size, label

    @property
    def at(self) -> int:
        return self.f.tell()

    def damaged(self, what: str, at: int | None = None) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"{self.label} is not a readable GGUF file: {what} at byte {self.at if at is None else at} (the file is "
            f"{self.size:,} bytes).",
            "It is truncated or damaged, or not a GGUF file: download it again, or write it again with llama.cpp's "
            "convert_hf_to_gguf.py.")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.at:
            raise self.damaged(f"{what} needs {n:,} bytes, {self.size - self.at:,} are left")

    def read(self, n: int, what: str) -> bytes:
        self.need(n, what)
        return self.f.read(n)

    def take(self, fmt: str, what: str):
        values = struct.unpack("<" + fmt, self.read(struct.calcsize("<" + fmt), what))
        return values if len(values) > 1 else values[0]

    def string(self, what: str) -> str:
        start = self.at
        raw = self.read(self.take("Q", f"the length of {what}"), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.damaged(f"{what} is not UTF-8", start) from None

    def value(self, code: int, what: str):
        """(value, type name) of one value of type `code`."""
        if code == STRING:
            return self.string(what), "STRING"
        if code == ARRAY:
            element, count = self.take("IQ", f"the element type and count of {what}")
            if element == ARRAY:  # the specification allows it; no llama.cpp key is one, and its loader refuses it
                raise self.damaged(f"{what} is an array of arrays", self.at - 12)
            name = self._type_name(element, what, self.at - 12)
            if count > MAX_ARRAY:
                raise self.damaged(f"{what} claims {count:,} elements (more than the {MAX_ARRAY:,} any GGUF key "
                                   "holds)", self.at - 12)
            # every element takes at least one byte (a string 8): a count the file cannot hold is refused here
            self.need(count * (8 if element == STRING else struct.calcsize(SCALARS[name][1])), f"{what}'s {count:,} "
                      f"elements")
            if element == STRING:
                return [self.string(f"element {i} of {what}") for i in range(count)], "ARRAY[STRING]"
            fmt = SCALARS[name][1]
            return list(struct.unpack(f"<{count}{fmt}", self.read(count * struct.calcsize(fmt), what))), \
                f"ARRAY[{name}]"
        name = self._type_name(code, what, self.at - 4)
        return self.take(SCALARS[name][1], what), name

    def _type_name(self, code: int, what: str, at: int) -> str:
        if code not in TYPE_NAMES or code == ARRAY:
            raise self.damaged(f"{what} has value type {code}, which GGUF does not define", at)
        return TYPE_NAMES[code]


def read_header(f: BinaryIO, label: str, size: int | None = None) -> GgufHeader:
    """The header of the GGUF file open as `f` (at its start), read up to the end of the key/value section. `label`
    names the file in errors; `size`: the file's size (default: from the handle)."""
    stream = _Stream(f, os.fstat(f.fileno()).st_size if size is None else size, label)
    magic = f.read(4)
    if magic != MAGIC:
        raise stream.damaged(f"the magic is {magic!r}, not {MAGIC!r}", 0)
    version = stream.take("I", "the version")
    if version not in VERSIONS:
        raise stream.damaged(f"version {version} (eagle-convert reads GGUF versions 2 and 3)", 4)
    tensor_count, key_count = stream.take("QQ", "the tensor and key counts")
    if key_count * SMALLEST_PAIR > stream.size - stream.at:
        raise stream.damaged(f"{key_count:,} keys cannot fit in the file", 16)
    metadata, types = {}, {}
    for i in range(key_count):
        key = stream.string(f"key {i}'s name")
        metadata[key], types[key] = stream.value(stream.take("I", f"{key}'s value type"), key)
    return GgufHeader(version, tensor_count, metadata, types, stream.at)


def read_header_of(path: str | os.PathLike) -> GgufHeader:
    """The header of the GGUF file at `path`: never its tensor data (a missing file is the caller's to check)."""
    with open(path, "rb") as f:
        return read_header(f, str(path))
