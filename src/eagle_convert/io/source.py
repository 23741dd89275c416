"""Where a checkpoint's bytes come from. A checkpoint reads its files only through a `FileSource`, so the same
code reads a local folder or a Hugging Face repo (io/hub.py provides the remote one), and so the benchmark can
count exactly what was read."""

from __future__ import annotations

import contextlib
import functools
import json
import mmap
import os
import threading
from pathlib import Path
from typing import Protocol

from ..errors import CorruptCheckpointError, LayoutError


class FileSource(Protocol):
    label: str  # how the user named it: a folder or a repo id

    def exists(self, rel: str) -> bool: ...
    def size(self, rel: str) -> int: ...
    def read_range(self, rel: str, offset: int, length: int, *, key: str | None = None) -> bytearray | memoryview: ...
    def local_path(self, rel: str) -> Path: ...  # whole file on disk (downloads it when remote)
    def describe(self, rel: str) -> str: ...  # for provenance and messages
    def revision(self) -> str | None: ...  # commit sha for repos, None for folders
    def warm(self, rel: str, offset: int, length: int) -> None: ...  # about to be read: start reading it now


PREFETCH_ASYNC = 8 << 20  # ranges at least this long are prefetched from a thread, chunk after chunk


@functools.cache
def _readahead_bytes(device: int) -> int:
    """The most one POSIX_FADV_WILLNEED call reads on this block device: max(read_ahead_kb, max_sectors_kb) (the
    kernel caps each call there; a longer call silently reads only its first part). 1 MiB when sysfs won't say."""
    device_dir = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    for queue in (device_dir / "queue", device_dir.resolve().parent / "queue"):  # a disk, or a partition's disk
        try:
            kb = max(int((queue / name).read_text()) for name in ("read_ahead_kb", "max_sectors_kb"))
        except (OSError, ValueError):
            continue
        return max(kb, 4) * 1024
    return 1 << 20


def _submit(path: str | os.PathLike, ranges: list[tuple[int, int]]) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        chunk = _readahead_bytes(os.fstat(fd).st_dev)
        for offset, length in ranges:
            for start in range(offset, offset + length, chunk):
                os.posix_fadvise(fd, start, min(chunk, offset + length - start), os.POSIX_FADV_WILLNEED)
    except OSError:
        pass  # advice only: the page faults read what was not prefetched
    finally:
        os.close(fd)


def prefetch(path: str | os.PathLike, offset: int, length: int) -> None:
    """Ask the kernel to read exactly [offset, offset + length) of `path` into the page cache, asynchronously; long
    ranges are submitted from a thread (posix_fadvise releases the GIL). No-op where posix_fadvise is missing."""
    if length <= 0 or not hasattr(os, "posix_fadvise"):
        return
    if length < PREFETCH_ASYNC:
        _submit(path, [(offset, length)])
    else:
        threading.Thread(target=_submit, args=(path, [(offset, length)]), name="eagle-convert-prefetch",
                         daemon=True).start()


class Warmer:
    """Reads, on one background thread and in order, the byte ranges a conversion is about to use, so the disk works
    ahead of the CPU (and while Python imports torch, ~1.5 s in which it would otherwise idle). Exact ranges only:
    nothing past them is read. At most half the memory available when it started is queued, so on a small machine
    pages are not read twice (read early, evicted, read again); what is left is read on demand."""

    def __init__(self) -> None:
        self._queue: list[tuple[str, list[tuple[int, int]]]] = []
        self._seen: dict[str, list[tuple[int, int]]] = {}
        self._budget = _available_memory() // 2
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, path: str | os.PathLike, offset: int, length: int) -> None:
        if not hasattr(os, "posix_fadvise") or length <= 0 or self.covers(path, offset, length) or length > self._budget:
            return
        self._seen.setdefault(str(path), []).append((offset, length))
        self._budget -= length
        with self._lock:
            self._queue.append((str(path), [(offset, length)]))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="eagle-convert-warm", daemon=True)
                self._thread.start()

    def covers(self, path: str | os.PathLike, offset: int, length: int) -> bool:
        """Whether [offset, offset + length) of `path` lies inside one range already queued."""
        return any(o <= offset and offset + length <= o + n for o, n in self._seen.get(str(path), ()))

    def add_files(self, paths: list[Path]) -> None:
        for path in paths:
            with contextlib.suppress(OSError):
                self.add(path, 0, path.stat().st_size)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._thread = None
                    return
                path, ranges = self._queue.pop(0)
            _submit(path, ranges)


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0  # unknown: warm nothing, read on demand


WARMER = Warmer()  # one per process: the CLI starts it on the draft before torch loads, the converter adds the rest


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

    def read_range(self, rel: str, offset: int, length: int, *, key: str | None = None) -> memoryview:
        mm = self._maps.get(rel)
        if mm is None:
            with open(self.root / rel, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    raise CorruptCheckpointError(f"{self.root / rel} is empty.", "Re-download the file.")
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            if hasattr(os, "posix_fadvise") and hasattr(mmap, "MADV_RANDOM"):  # only where prefetch() works
                mm.madvise(mmap.MADV_RANDOM)
            self._maps[rel] = mm
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


def warm_local_checkpoint(folder: str) -> None:
    """Start reading every weight file of a local checkpoint folder in the background (a draft: all of it is
    converted). Best effort and silent: a folder that is not a checkpoint fails later, with the real message."""
    with contextlib.suppress(Exception):
        source = LocalSource(folder)
        if source.exists("config.json"):
            WARMER.add_files([source.local_path(rel) for rel in find_weights(source)[2]])


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
