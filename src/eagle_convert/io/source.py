"""Where a checkpoint's bytes come from. A checkpoint reads its files only through a `FileSource`, so the same
code reads a local folder or a Hugging Face repo (io/hub/hub_source.py provides the remote one), and so the benchmark
can count exactly what was read."""

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
    value = parse_json(bytes(source.read_range(rel, 0, source.size(rel))), source.describe(rel),
                       "Fix or re-download it.")
    if not isinstance(value, dict):
        raise CorruptCheckpointError(f"{source.describe(rel)} holds a JSON {type(value).__name__}, not an object.",
                                     "Fix or re-download it.")
    return value


MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit
HEADER_LEN_KEY, HEADER_KEY = "__header_len__", "__header__"  # a remote source caches a header's ranges under these
# Bytes per element of every dtype code the converter reads (checkpoint.py maps the same codes to torch dtypes).
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
    "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}
CORRUPT_HINT = "The file is corrupt: re-download it, or re-export it with safetensors."


def read_safetensors_header(source: FileSource, rel: str) -> tuple[dict, int]:
    """The parsed JSON header of a safetensors file and the absolute offset where its data starts; reads 8 + header
    length bytes and nothing else. The header is checked as safetensors' own loader checks it (check_header) before
    any offset in it is used, for local files, Hub ranges and rank files alike."""
    where = source.describe(rel)
    size = source.size(rel)
    if size < 8:
        raise CorruptCheckpointError(f"{where} is too short to be a safetensors file ({size} bytes).",
                                     "Re-download it; the file is truncated.")
    (header_len,) = struct.unpack("<Q", bytes(source.read_range(rel, 0, 8, key=HEADER_LEN_KEY)))
    if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
        raise CorruptCheckpointError(f"{where} has an impossible header length "
                                     f"({header_len} bytes in a file of {size}).",
                                     "The file is corrupt or truncated: re-download it.")
    header = parse_json(bytes(source.read_range(rel, 8, header_len, key=HEADER_KEY)), f"{where} has a header that",
                        CORRUPT_HINT, strict=True)
    check_header(header, size - 8 - header_len, where)
    return header, 8 + header_len


def parse_json(data: bytes, what: str, hint: str, *, strict: bool = False) -> object:
    """`data` as JSON; `strict` as safetensors (serde) reads a header: no NaN/Infinity constants, and no duplicate
    keys (which entry counts would be a guess). Nesting too deep for the parser is corruption too, not a crash."""
    hooks = {"object_pairs_hook": _no_duplicates, "parse_constant": _no_constant} if strict else {}
    try:
        return json.loads(data, **hooks)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(f"{what} is not valid JSON ({exc}).", hint) from exc
    except ValueError as exc:  # from the strict hooks
        raise CorruptCheckpointError(f"{what} is not valid JSON: {exc}.", hint) from exc
    except RecursionError as exc:
        raise CorruptCheckpointError(f"{what} is JSON nested too deeply to parse.", hint) from exc


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {twice!r} appears twice")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def check_header(header: object, data_len: int, where: str) -> None:
    """Raise CorruptCheckpointError unless `header` is a safetensors header that its own loader accepts for a data
    section of `data_len` bytes: every entry a known dtype, a shape of non-negative integers and two non-negative
    integer data_offsets spanning exactly prod(shape) x dtype size; the entries, in offset order, contiguous from 0
    and ending exactly at the end of the file (no overlap, gap or trailing bytes); `__metadata__` a str -> str map."""
    if not isinstance(header, dict):
        raise CorruptCheckpointError(f"{where} has a header that is not a JSON object.", CORRUPT_HINT)
    metadata = header.get("__metadata__")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise CorruptCheckpointError(f"{where}: its __metadata__ is not a map of strings to strings.", CORRUPT_HINT)
    spans = sorted((_span_of(name, entry, where), name) for name, entry in header.items() if name != "__metadata__")
    end, last = 0, None
    for (begin, stop), name in spans:
        if begin != end:
            what = (f"overlaps the bytes of {last!r}" if begin < end else
                    f"leaves bytes {end}..{begin} of the data section unused" + (f" after {last!r}" if last else ""))
            raise CorruptCheckpointError(f"{where}: tensor {name!r} starts at byte {begin} of the data section and "
                                         f"{what}.", CORRUPT_HINT)
        end, last = stop, name
    if end > data_len:
        raise CorruptCheckpointError(f"{where} is truncated or corrupt: its tensors need {end} bytes of data (up to "
                                     f"the end of {last!r}), the file holds {data_len}.", CORRUPT_HINT)
    if end < data_len:
        raise CorruptCheckpointError(f"{where}: its tensors end at byte {end} of the data section" +
                                     (f" (after {last!r})" if last else "") + f", but the file holds {data_len} bytes "
                                     "of data: trailing bytes that no tensor accounts for.", CORRUPT_HINT)


def _span_of(name: str, entry: object, where: str) -> tuple[int, int]:
    """[begin, end) of one header entry in the data section, after checking the entry itself."""
    def bad(what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{where}: the header entry of tensor {name!r} {what} ({entry!r:.200}).",
                                      CORRUPT_HINT)

    if not isinstance(entry, dict):
        raise bad("is not a JSON object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPE_BYTES:
        raise bad(f"has an unknown or unsupported dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise bad("has a shape that is not a list of non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(x) for x in offsets):
        raise bad("has data_offsets that are not two non-negative integers")
    begin, end = offsets
    nbytes = SAFETENSORS_DTYPE_BYTES[dtype]
    for d in shape:
        nbytes *= d
    if end - begin != nbytes:
        raise bad(f"spans {end - begin} bytes ({begin}..{end}), but its shape and dtype need {nbytes}")
    return begin, end
