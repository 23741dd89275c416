"""Streaming, verified safetensors output.

Safetensors files are streamed: the header is computed from the plan (names, dtypes, shapes) and the file given its
full size, then each tensor is produced and, chunk by chunk, cast, written, compared byte for byte with the file as the
safetensors library reloads it, and handed to the disk; then released. Peak memory is a chunk plus one input tensor's
pages (file-backed when local), never a shard, and the disk writes while the next chunk is computed. The files are
written into a staging folder (staging.py) that becomes the output only when complete."""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy
import torch

from ..errors import VerificationError
from . import interrupts
from .interrupts import pause_for_test
from .safetensors import SAFETENSORS_CODES, nbytes_of, tensor_bytes


@dataclass(frozen=True)
class OutTensor:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)


def shard(tensors: list[OutTensor], max_shard_bytes: int) -> list[list[OutTensor]]:
    """Greedy sharding in plan order; a tensor larger than the limit gets a shard of its own."""
    shards: list[list[OutTensor]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def sharded_files(tensors: list[OutTensor], max_shard_bytes: int) -> dict[str, list[OutTensor]]:
    """Output file name -> the tensors it holds, in plan order (`shard`, named as transformers names shards)."""
    shards = shard(tensors, max_shard_bytes)
    return dict(zip(shard_names(len(shards)), shards))


def write_index(folder: Path, files: dict[str, list[OutTensor]]) -> None:
    """`model.safetensors.index.json` for an output in several files (none for one), as transformers writes it."""
    if len(files) > 1:
        write_json(folder / "model.safetensors.index.json", {
            "metadata": {"total_size": sum(t.nbytes for ts in files.values() for t in ts)},
            "weight_map": {t.name: rel for rel, ts in files.items() for t in ts}})


def _header(tensors: list[OutTensor]) -> bytes:
    entries, offset = {"__metadata__": {"format": "pt"}}, 0
    for t in tensors:
        entries[t.name] = {"dtype": SAFETENSORS_CODES[t.dtype], "shape": list(t.shape),
                           "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(entries, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes so tensor data stays aligned
    return struct.pack("<Q", len(raw)) + raw


CHUNK_BYTES = 8 << 20  # the unit of casting, writing and comparing: one reused buffer, cache-hot throughout
WRITERS = 2  # tensors in flight: copying into the page cache costs ~1 s/GB of CPU here, so two cores share it


def write_safetensors(path: Path, tensors: list[OutTensor], produce: Callable[[OutTensor], torch.Tensor],
                      writers: int = WRITERS,
                      on_nonfinite: Callable[[OutTensor, torch.Tensor, int], None] | None = None) -> None:
    """Stream `tensors` into `path`, `writers` tensors at a time (each at its own offset), calling `produce` for each.

    `produce` returns the tensor to write in its planned shape, either in the planned dtype or in one it is cast from
    here, chunk by chunk, through a small reused buffer (`.to()` would allocate the whole output: GBs of fresh pages).
    The bytes written are not hashed: provenance hashes what is read, and what is written is checked byte for byte.
    Float chunks are scanned for NaN/Inf as they are written; a tensor that had any is passed, with the value
    produced and the count written, to `on_nonfinite` (which may raise).
    On any error the other writers stop at their next chunk, and all have stopped when this raises."""
    names = {t.name for t in tensors}
    header = _header(tensors)
    offsets = [len(header)]
    for t in tensors:
        offsets.append(offsets[-1] + t.nbytes)
    stop = threading.Event()

    def write_one(t: OutTensor, offset: int) -> None:
        if stop.is_set():
            return
        try:
            value = produce(t)
            if tuple(value.shape) != t.shape or not (value.dtype == t.dtype or (
                    value.dtype.is_floating_point and t.dtype.is_floating_point)):
                raise AssertionError(f"{t.name}: produced {value.dtype} {tuple(value.shape)}, planned {t.dtype} "
                                     f"{t.shape}")
            pause_for_test("write", stop)
            nonfinite = _write_tensor(fd, path, t, value, offset, stop, flusher)
            if nonfinite and on_nonfinite is not None:
                on_nonfinite(t, value, nonfinite)
        except BaseException:
            stop.set()  # the other writer stops at its next chunk, and no new tensor starts
            raise

    with open(path, "wb") as f:
        f.write(header)
        f.truncate(offsets[-1])  # full size now: safetensors reloads it at once
        f.flush()
        _check_names(path, names)
        fd = f.fileno()
        # Our parallelism is the writers and the hashing threads; torch's own threads on top would oversubscribe.
        # Writeback is started from a thread of its own: the block layer throttles it while reads are in flight
        # (writeback throttling), and a writer that waited there would stop casting and copying too.
        with _torch_threads(1), ThreadPoolExecutor(1, thread_name_prefix="eagle-convert-flush") as flusher, \
                ThreadPoolExecutor(writers, thread_name_prefix="eagle-convert-write") as pool:
            jobs = []
            try:  # submitting is inside: a signal that lands while writers already run must stop them too
                for t, offset in zip(tensors, offsets):
                    jobs.append(pool.submit(write_one, t, offset))
                for job in jobs:
                    interrupts.wait_for(job)
            except BaseException:
                stop.set()
                for job in jobs:
                    job.cancel()
                raise  # leaving the pools waits for the running writers, which stop at their next chunk
        os.fsync(fd)


def _check_names(path: Path, names: set[str]) -> None:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        if set(f.keys()) != names:
            raise VerificationError(f"{path.name} reloads with tensors {sorted(f.keys())}, expected {sorted(names)}.",
                                    "This is a bug in eagle-convert: please report it with the command you ran.")


def _write_tensor(fd: int, path: Path, t: OutTensor, value: torch.Tensor, offset: int, stop: threading.Event,
                  flusher: ThreadPoolExecutor) -> int:
    """Write `value` as `t` at `offset`, chunk by chunk: cast it into a reused buffer, write it, compare it with the
    file's bytes as the safetensors library reloads them (a view of the file's pages, no copy), and have `flusher`
    start their writeback. Returns how many NaN/Inf values were written (counted only in a chunk that has any: the
    check of a cache-hot chunk costs little, the count is for the rare bad one)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as st:
        back = st.get_tensor(t.name)
    if back.dtype != t.dtype or tuple(back.shape) != t.shape:
        raise VerificationError(f"{path.name}:{t.name} reloads as {back.dtype} {tuple(back.shape)}, not as written "
                                f"({t.dtype} {t.shape}).", "This is a bug in eagle-convert: please report it.")
    written = tensor_bytes(back)
    flat = value.contiguous().reshape(-1)
    step = max(1, CHUNK_BYTES // t.dtype.itemsize)
    buffer = torch.empty(min(step, flat.numel()), dtype=t.dtype) if value.dtype != t.dtype else None
    done = nonfinite = 0
    for start in range(0, flat.numel(), step):
        if stop.is_set():
            return nonfinite
        interrupts.check()  # a signal whose exception was lost in the main thread stops the writers here
        piece = flat[start : start + step]
        if buffer is not None:
            piece = buffer[: piece.numel()].copy_(piece)  # the same conversion as .to(dtype)
        if t.dtype.is_floating_point and not all_finite(piece):
            nonfinite += count_nonfinite(piece)
        data = tensor_bytes(piece)
        _pwrite_all(fd, data, offset + done)
        if not same_bytes(data, written[done : done + len(data)]):
            raise VerificationError(f"{path.name}:{t.name} does not read back as written.",
                                    "The disk or filesystem corrupted the output; check free space and retry.")
        flusher.submit(_start_writeback, fd, offset + done, len(data))
        done += len(data)
    return nonfinite


def all_finite(t: torch.Tensor) -> bool:
    """Whether every value of a float tensor is finite. A finite sum proves it (NaN and Inf survive any addition) at
    the cost of one reduction (1-3 ms per 8 MB here, 10-30x less than isfinite); only a non-finite sum, which may also
    be large finite values overflowing, pays for the exact test. FP8 (an MTP layer copied as the target stores it) has
    no CPU reductions: its chunk is widened first."""
    t = _widened(t)
    return math.isfinite(float(t.sum())) or bool(torch.isfinite(t).all())


def _widened(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype.is_floating_point and t.element_size() == 1 else t


def count_nonfinite(t: torch.Tensor) -> int:
    """NaN and +-Inf values in `t` (0 for integer and bool tensors)."""
    if not t.dtype.is_floating_point:
        return 0
    return int(t.numel() - int(torch.isfinite(_widened(t)).sum()))


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def same_bytes(a: memoryview, b: memoryview) -> bool:
    """Byte equality at memory speed: compared as 8-byte words (twice as fast as bytes), then the odd tail."""
    if len(a) != len(b):
        return False
    x, y = numpy.frombuffer(a, numpy.uint8), numpy.frombuffer(b, numpy.uint8)
    words = len(a) // 8 * 8
    return bool(numpy.array_equal(x[:words].view(numpy.uint64), y[:words].view(numpy.uint64))
                and numpy.array_equal(x[words:], y[words:]))


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing [offset, offset + length) to disk now rather than at the final fsync (the kernel waits until GBs
    are dirty), so the disk writes while the next chunk is computed. Dirty pages are not dropped."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=False) + "\n")
