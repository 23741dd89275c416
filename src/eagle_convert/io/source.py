"""Where a checkpoint's bytes come from. A checkpoint reads its files only through a `FileSource`, so the same
code reads a local folder or a Hugging Face repo (io/hub.py provides the remote one), and so the benchmark can
count exactly what was read."""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path
from typing import Protocol

from ..errors import CorruptCheckpointError, LayoutError
from .readahead import WARMER, prefetch


class FileSource(Protocol):
    label: str  # how the user named it: a folder or a repo id

    def exists(self, rel: str) -> bool: ...
    def size(self, rel: str) -> int: ...
    def read_range(self, rel: str, offset: int, length: int, *, key: str | None = None) -> bytearray | memoryview: ...
    def local_path(self, rel: str) -> Path: ...  # whole file on disk (downloads it when remote)
    def describe(self, rel: str) -> str: ...  # for provenance and messages
    def revision(self) -> str | None: ...  # commit sha for repos, None for folders
    def warm(self, rel: str, offset: int, length: int) -> None: ...  # about to be read: start reading it now
    def files(self) -> list[str]: ...  # every file's relative (posix) path, for layout detection


class LocalSource:
    """A folder on disk. Tensor bytes are served from a private (copy-on-write) mmap: file-backed pages that cost no
    anonymous memory and never write to the input. The map is advised MADV_RANDOM, so a page fault reads only its
    page and never the readahead window around it, and every range handed out is prefetched exactly: a tensor costs
    its own bytes of disk reads and no more (a 8 MB readahead past the LM head would read another tensor)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()
        self.label = str(root)
        self._maps: dict[str, mmap.mmap] = {}

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def size(self, rel: str) -> int:
        return (self.root / rel).stat().st_size

    def local_path(self, rel: str) -> Path:
        return self.root / rel

    def describe(self, rel: str) -> str:
        return str(self.root / rel)

    def revision(self) -> str | None:
        return None

    def warm(self, rel: str, offset: int, length: int) -> None:
        WARMER.add(self.root / rel, offset, length)

    def files(self) -> list[str]:
        return list_files(self.root)

    def read_range(self, rel: str, offset: int, length: int, *, key: str | None = None) -> memoryview:
        mm = self._maps.get(rel)
        if mm is None:
            with open(self.root / rel, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    raise CorruptCheckpointError(f"{self.root / rel} is empty.", "Re-download the file.")
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            if hasattr(os, "posix_fadvise") and hasattr(mmap, "MADV_RANDOM"):  # only where prefetch() works
                mm.madvise(mmap.MADV_RANDOM)
            mm = self._maps.setdefault(rel, mm)  # two writer threads may open the same file at once: one map wins
        if offset + length > len(mm):
            raise CorruptCheckpointError(
                f"{self.root / rel} is truncated: {offset + length} bytes needed, {len(mm)} present.",
                "Re-download the file; the copy on disk is incomplete.",
            )
        if not WARMER.covers(self.root / rel, offset, length):
            prefetch(self.root / rel, offset, length)
        return memoryview(mm)[offset : offset + length]

    def close(self) -> None:
        # Views handed out keep a map alive; dropping our reference is enough for the GC to unmap it later.
        self._maps.clear()


LIST_DEPTH, LIST_LIMIT = 3, 10_000  # deep enough for Megatron's iter_*/mp_rank_*/file; bounded for huge trees


def list_files(root: Path) -> list[str]:
    """Relative paths of the files under `root`, at most LIST_DEPTH levels deep and LIST_LIMIT of them (layout
    detection needs names, never a full walk of a big tree)."""
    found: list[str] = []
    level = [root]
    for _ in range(LIST_DEPTH):
        deeper = []
        for folder in level:
            for entry in sorted(folder.iterdir()):
                if entry.is_dir():
                    deeper.append(entry)
                elif entry.is_file():
                    found.append(entry.relative_to(root).as_posix())
                if len(found) >= LIST_LIMIT:
                    return found
        level = deeper
    return found


# Weight files we look for, in order of preference; an index names the shards.
WEIGHT_LAYOUTS = (
    ("safetensors", "model.safetensors.index.json", "model.safetensors"),
    ("bin", "pytorch_model.bin.index.json", "pytorch_model.bin"),
)


def find_weights(source: FileSource) -> tuple[str, dict[str, str], list[str]]:
    """(format, weight map, weight files) of a checkpoint: its index's shards, or its single weight file (the weight
    map is then empty: a single file's names live in the file itself)."""
    for fmt, index_name, single_name in WEIGHT_LAYOUTS:
        if source.exists(index_name):
            index = read_json(source, index_name)
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CorruptCheckpointError(f"{source.describe(index_name)} has no weight_map.",
                                             "Fix or re-download the index file.")
            shards = sorted(set(weight_map.values()))
            for shard in shards:
                if not source.exists(shard):
                    raise CorruptCheckpointError(
                        f"{source.describe(index_name)} names shard {shard!r}, which is not in {source.label}.",
                        "Download the missing shard (or the whole checkpoint again).")
            return fmt, dict(weight_map), shards
        if source.exists(single_name):
            return fmt, {}, [single_name]
    raise LayoutError(f"{source.label} has no weights: expected model.safetensors, pytorch_model.bin, or a sharded "
                      "index of either.", "Point to a folder that holds the weight files.")


def read_json(source: FileSource, rel: str) -> dict:
    data = bytes(source.read_range(rel, 0, source.size(rel)))
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(f"{source.describe(rel)} is not valid JSON ({exc}).", "Fix or re-download it.") from exc
    if not isinstance(value, dict):
        raise CorruptCheckpointError(f"{source.describe(rel)} holds a JSON {type(value).__name__}, not an object.",
                                     "Fix or re-download it.")
    return value


MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit
HEADER_LEN_KEY, HEADER_KEY = "__header_len__", "__header__"  # a remote source caches a header's ranges under these


def read_safetensors_header(source: FileSource, rel: str) -> tuple[dict, int]:
    """The parsed JSON header of a safetensors file and the absolute offset where its data starts; reads 8 + header
    length bytes and nothing else."""
    where = source.describe(rel)
    size = source.size(rel)
    if size < 8:
        raise CorruptCheckpointError(f"{where} is too short to be a safetensors file ({size} bytes).",
                                     "Re-download it; the file is truncated.")
    (header_len,) = struct.unpack("<Q", bytes(source.read_range(rel, 0, 8, key=HEADER_LEN_KEY)))
    if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
        raise CorruptCheckpointError(f"{where} has an impossible header length ({header_len} bytes in a file of {size}).",
                                     "The file is corrupt or truncated: re-download it.")
    try:
        header = json.loads(bytes(source.read_range(rel, 8, header_len, key=HEADER_KEY)))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(f"{where} has a header that is not valid JSON ({exc}).",
                                     "The file is corrupt: re-download it.") from exc
    if not isinstance(header, dict):
        raise CorruptCheckpointError(f"{where} has a header that is not a JSON object.", "The file is corrupt: re-download it.")
    return header, 8 + header_len
