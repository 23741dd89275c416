"""Reading ahead: asking the kernel to read byte ranges into the page cache before they are used, so the disk works
while the CPU does something else (casting, hashing, or importing torch). Advice only: a page not read ahead is read
by its page fault. Exact ranges: nothing past them is read (a conversion must read no more of a target than the tensors
it copies)."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from pathlib import Path

from . import background

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
                if background.CANCEL.is_set():
                    return
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
        background.start(_submit, path, [(offset, length)], name="eagle-convert-prefetch")


class Warmer:
    """Reads, on one background thread and in order, the byte ranges a conversion is about to use, so the disk works
    ahead of the CPU (and while Python imports torch, ~1.5 s in which it would otherwise idle). Exact ranges only:
    nothing past them is read. At most half the memory available when the conversion started is queued, so on a small
    machine pages are not read twice (read early, evicted, read again); what is left is read on demand. Its state
    only saves work: `forget` it when a conversion ends (a range read long ago may have been evicted since)."""

    def __init__(self) -> None:
        self._queue: list[tuple[str, list[tuple[int, int]]]] = []
        self._lock = threading.Lock()
        self._running = False  # a reading thread is on the queue (it clears this, under the lock, when it is empty)
        self.forget()

    def forget(self) -> None:
        """Drop what was queued and seen (background.finish() stops a read in progress)."""
        with self._lock:
            self._queue.clear()
            self._seen: dict[str, list[tuple[int, int]]] = {}
            self._budget: int | None = None  # measured when the next conversion queues its first range

    def add(self, path: str | os.PathLike, offset: int, length: int) -> None:
        if not hasattr(os, "posix_fadvise") or length <= 0 or self.covers(path, offset, length):
            return
        with self._lock:
            if self._budget is None:
                self._budget = _available_memory() // 2
            length = min(length, self._budget)  # the rest is read on demand
            if length <= 0:
                return
            self._budget -= length
            self._seen.setdefault(str(path), []).append((offset, length))
            self._queue.append((str(path), [(offset, length)]))
            if not self._running:
                self._running = True
                try:
                    background.start(self._run, name="eagle-convert-warm")
                except BaseException:
                    self._running = False  # else no reading thread would ever start again
                    raise

    def idle(self) -> bool:
        """No thread is reading the queue (it has drained it, or was never needed)."""
        with self._lock:
            return not self._running

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
                if not self._queue or background.CANCEL.is_set():
                    self._running = False
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
background.forget_at_end(WARMER.forget)  # forgotten when a conversion ends (background.end_reads)
