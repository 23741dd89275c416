"""Read one tensor at a time, and only the bytes it occupies."""

from __future__ import annotations

import hashlib
import threading

import torch

from ..checkpoint import Checkpoint, TensorRef


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw bytes of a tensor (made contiguous), without a copy when it already is."""
    t = t.contiguous()
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def read_tensor(ckpt: Checkpoint, ref: TensorRef) -> torch.Tensor:
    """The tensor `ref` names, backed by file pages where possible (no anonymous copy for local safetensors)."""
    if ref.offset is None:
        return ckpt.load_pickle(ref.file)[ref.name]
    buf = ckpt.source.read_range(ref.file, ref.offset, ref.nbytes, key=ref.name)
    if ref.nbytes == 0:
        return torch.empty(ref.shape, dtype=ref.dtype)
    flat = torch.frombuffer(buf, dtype=torch.uint8, count=ref.nbytes)
    return flat.view(ref.dtype).reshape(ref.shape)


def sha256_of(t: torch.Tensor) -> str:
    return hashlib.sha256(tensor_bytes(t)).hexdigest()


class Digest:
    """The sha256 of a buffer, computed on a thread of its own (hashlib releases the GIL), so hashing a tensor runs on
    one core while the tensor is cast or written on another. The buffer is released as soon as it is hashed."""

    def __init__(self, data: memoryview):
        self._data: memoryview | None = data
        self._hex: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="eagle-convert-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._hex = hashlib.sha256(self._data).hexdigest()
        except BaseException as exc:  # re-raised by hexdigest(), in the caller's thread
            self._error = exc
        finally:
            self._data = None

    def hexdigest(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._hex


def read_rows(ckpt: Checkpoint, ref: TensorRef, rows: list[int]) -> torch.Tensor:
    """Selected rows of a 2-D tensor, reading only their bytes (a row of a row-major tensor is contiguous)."""
    if ref.offset is None:
        return read_tensor(ckpt, ref)[rows].clone()
    row_bytes = ref.nbytes // ref.shape[0]
    out = torch.empty((len(rows), *ref.shape[1:]), dtype=ref.dtype)
    for i, r in enumerate(rows):
        buf = ckpt.source.read_range(ref.file, ref.offset + r * row_bytes, row_bytes, key=f"{ref.name}[{r}]")
        out[i] = torch.frombuffer(buf, dtype=torch.uint8, count=row_bytes).view(ref.dtype).reshape(ref.shape[1:])
    return out
