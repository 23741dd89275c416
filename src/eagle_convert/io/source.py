"""Where a checkpoint's bytes come from. A checkpoint reads its files only through a `FileSource`, so the same
code reads a local folder or a Hugging Face repo (io/hub.py provides the remote one), and so the benchmark can
count exactly what was read."""

from __future__ import annotations

import json
import mmap
import os
import threading
from pathlib import Path
from typing import Protocol

from ..errors import CorruptCheckpointError


class FileSource(Protocol):
    label: str  # how the user named it: a folder or a repo id

    def exists(self, rel: str) -> bool: ...
    def size(self, rel: str) -> int: ...
    def read_range(self, rel: str, offset: int, length: int, *, key: str | None = None) -> bytearray | memoryview: ...
    def local_path(self, rel: str) -> Path: ...  # whole file on disk (downloads it when remote)
    def describe(self, rel: str) -> str: ...  # for provenance and messages
    def revision(self) -> str | None: ...  # commit sha for repos, None for folders


PREFETCH_CHUNK = 1 << 20  # per WILLNEED call: the kernel reads at most max(read_ahead_kb, max_sectors_kb) per call
PREFETCH_ASYNC = 8 << 20  # ranges at least this long are prefetched from a thread, chunk after chunk


def prefetch(path: str | os.PathLike, offset: int, length: int) -> None:
    """Ask the kernel to read exactly [offset, offset + length) of `path` into the page cache, asynchronously; long
    ranges are submitted from a thread (posix_fadvise releases the GIL). No-op where posix_fadvise is missing."""
    if length <= 0 or not hasattr(os, "posix_fadvise"):
        return

    def submit() -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            for start in range(offset, offset + length, PREFETCH_CHUNK):
                os.posix_fadvise(fd, start, min(PREFETCH_CHUNK, offset + length - start), os.POSIX_FADV_WILLNEED)
        except OSError:
            pass  # advice only: the page faults read what was not prefetched
        finally:
            os.close(fd)

    if length < PREFETCH_ASYNC:
        submit()
    else:
        threading.Thread(target=submit, name="eagle-convert-prefetch", daemon=True).start()


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
        prefetch(self.root / rel, offset, length)
        return memoryview(mm)[offset : offset + length]

    def close(self) -> None:
        # Views handed out keep a map alive; dropping our reference is enough for the GC to unmap it later.
        self._maps.clear()


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
