"""sha256 of the bytes read, for provenance, computed off the writer's path.

A `Digest` hashes one buffer on a thread of its own (hashlib releases the GIL). `PREHASH` hashes byte ranges of local
files before they are needed: the CLI starts it on a local draft's tensors before importing torch (io/early.py), so
one core hashes the draft (and reads it from disk) while the other spends ~1.5 s importing torch. A range is hashed
from the file itself, so its digest is the sha256 of exactly the bytes a tensor read from that range is made of.
Torch-free."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
import threading
import zipfile
from collections import deque
from concurrent.futures import Future

from . import background
from .interrupts import wait_for
from .source import LocalSource, find_weights, read_safetensors_header

HASH_STEP = 16 << 20  # bytes hashed between two looks at background.CANCEL (~20 ms of one core)


def _sha256(data: memoryview) -> str:
    """hashlib.sha256(data), in steps, so that background.finish() stops it within one step."""
    digest = hashlib.sha256()
    for start in range(0, len(data), HASH_STEP):
        if background.CANCEL.is_set():
            raise background.Cancelled("hashing stopped: the conversion ended")
        digest.update(data[start : start + HASH_STEP])
    return digest.hexdigest()


class Digest:
    """The sha256 of a buffer, computed on a thread of its own, so hashing a tensor runs on one core while the
    tensor is cast or written on another. The buffer is released as soon as it is hashed."""

    def __init__(self, data: memoryview | None = None, *, future: Future | None = None):
        self._future = future or Future()
        if future is None:
            background.start(self._run, data, name="eagle-convert-sha256")

    def _run(self, data: memoryview) -> None:
        try:
            self._future.set_result(_sha256(data))
        except BaseException as exc:  # re-raised by hexdigest(), in the caller's thread
            self._future.set_exception(exc)


    def hexdigest(self) -> str:
        return wait_for(self._future)  # in steps that look for a signal: the main thread waits here


def hash_file_range(path: str, offset: int, length: int) -> str:
    """sha256 of bytes [offset, offset + length) of `path`, through a read-only map (one GIL-free hashlib call)."""
    with open(path, "rb") as f:
        if length == 0:
            return hashlib.sha256(b"").hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)[offset : offset + length]
            try:
                if len(view) != length:
                    raise ValueError(f"{path} is shorter than {offset + length} bytes")
                return _sha256(view)
            finally:
                view.release()


def _identity(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


class Prehasher:
    """Hashes file ranges, in the order given, on one background thread; `take` hands out the pending digest of a
    range that was queued, if its file has not changed since. The thread ends when the queue is empty, and
    background.finish() stops it within a hash step: a conversion that fails early exits at once, without waiting
    for the rest of the draft to be hashed."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[str, int, int], tuple[tuple[int, int, int], Future]] = {}
        self._queue: deque[tuple[tuple[str, int, int], Future]] = deque()
        self._lock = threading.Lock()
        self._running = False  # a hashing thread is on the queue (it clears this, under the lock, when it is empty)

    def start(self, ranges: list[tuple[str, int, int]]) -> None:
        with self._lock:
            for path, offset, length in ranges:
                key = (os.path.realpath(path), offset, length)
                if key in self._jobs:
                    continue
                future: Future = Future()
                self._jobs[key] = (_identity(key[0]), future)
                self._queue.append((key, future))
            if not self._running and self._queue:
                self._running = True
                try:
                    background.start(self._run, name="eagle-convert-prehash")
                except BaseException:
                    self._running = False  # and nothing queued may be waited for: no thread will hash it
                    for key, future in self._queue:
                        self._jobs.pop(key, None)
                        future.cancel()
                    self._queue.clear()
                    raise

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue or background.CANCEL.is_set():
                    self._running = False
                    return  # what is left is cancelled by forget()
                key, future = self._queue.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(hash_file_range(*key))
                except BaseException as exc:  # re-raised where the digest is used
                    future.set_exception(exc)

    def forget(self) -> None:
        """Drop the ranges nobody took (a tensor the conversion dropped, or one that never ran): those not started
        are not hashed at all."""
        with self._lock:
            jobs, self._jobs = self._jobs, {}
            self._queue.clear()
        for _, future in jobs.values():
            future.cancel()

    def take(self, path: str | os.PathLike, offset: int, length: int) -> Digest | None:
        key = (os.path.realpath(path), offset, length)
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is None:
            return None
        identity, future = job
        with contextlib.suppress(OSError):
            if _identity(key[0]) == identity:
                return Digest(future=future)
        future.cancel()
        return None


PREHASH = Prehasher()
background.forget_at_end(PREHASH.forget)  # forgotten when a conversion ends (background.end_reads)


def torch_zip_records(path: str | os.PathLike) -> list[tuple[int, int]]:
    """(offset, length) of every tensor storage record (`*/data/N`, stored uncompressed) in a torch zip checkpoint;
    empty for anything else (the legacy pickle format, a compressed record). Reads the zip directory only."""
    records = []
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as z:
            for info in z.infolist():
                if "/data/" not in info.filename or info.filename.endswith("/"):
                    continue
                if info.compress_type != zipfile.ZIP_STORED:
                    return []
                f.seek(info.header_offset + 26)
                name_len, extra_len = struct.unpack("<HH", f.read(4))
                records.append((info.header_offset + 30 + name_len + extra_len, info.file_size))
    except (OSError, zipfile.BadZipFile, struct.error):
        return []
    return records


def tensor_ranges(folder: str | os.PathLike) -> list[tuple[str, int, int]]:
    """The byte ranges holding a local checkpoint's tensors, in file order: safetensors tensors from their headers,
    `.bin` storage records from the zip directory."""
    source = LocalSource(folder)
    ranges = []
    for rel in find_weights(source)[2]:
        path = str(source.local_path(rel))
        if rel.endswith(".safetensors"):
            header, data_start = read_safetensors_header(source, rel)
            spans = sorted(tuple(e["data_offsets"]) for name, e in header.items() if name != "__metadata__")
            ranges += [(path, data_start + begin, end - begin) for begin, end in spans]
        else:
            ranges += [(path, offset, length) for offset, length in torch_zip_records(path)]
    return ranges
