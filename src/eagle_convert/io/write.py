"""Atomic, streaming, verified output.

The output folder is built in a staging folder beside OUT and renamed into place only when complete and verified,
so a failure or Ctrl-C leaves neither a half-written OUT nor the staging folder. Safetensors files are streamed: the
header is computed from the plan (names, dtypes, shapes), then each tensor is produced, written and released, so
peak memory is one tensor, never a shard."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint import SAFETENSORS_CODES
from ..errors import VerificationError
from .read import tensor_bytes


@dataclass(frozen=True)
class OutTensor:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


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


def _header(tensors: list[OutTensor]) -> bytes:
    entries, offset = {"__metadata__": {"format": "pt"}}, 0
    for t in tensors:
        entries[t.name] = {"dtype": SAFETENSORS_CODES[t.dtype], "shape": list(t.shape),
                           "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(entries, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes so tensor data stays aligned
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(path: Path, tensors: list[OutTensor], produce: Callable[[OutTensor], torch.Tensor]) -> dict[str, str]:
    """Stream `tensors` into `path`, calling `produce` for one tensor at a time; returns name -> sha256 written."""
    digests = {}
    with open(path, "wb") as f:
        f.write(_header(tensors))
        for t in tensors:
            value = produce(t)
            if value.dtype != t.dtype or tuple(value.shape) != t.shape:
                raise AssertionError(f"{t.name}: produced {value.dtype} {tuple(value.shape)}, planned {t.dtype} {t.shape}")
            data = tensor_bytes(value)
            f.write(data)
            digests[t.name] = hashlib.sha256(data).hexdigest()
            del value, data
        f.flush()
        os.fsync(f.fileno())
    return digests


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=False) + "\n")


def verify_safetensors(folder: Path, files: dict[str, list[OutTensor]], digests: dict[str, str]) -> None:
    """Reload every written tensor with the safetensors library itself and compare dtype, shape and bytes."""
    from safetensors import safe_open

    for rel, tensors in files.items():
        with safe_open(str(folder / rel), framework="pt") as f:
            if set(f.keys()) != {t.name for t in tensors}:
                raise VerificationError(f"{rel} reloads with tensors {sorted(f.keys())}, expected {[t.name for t in tensors]}.",
                                        "This is a bug in eagle-convert: please report it with the command you ran.")
            for t in tensors:
                value = f.get_tensor(t.name)
                if value.dtype != t.dtype or tuple(value.shape) != t.shape or \
                        hashlib.sha256(tensor_bytes(value)).hexdigest() != digests[t.name]:
                    raise VerificationError(f"{rel}:{t.name} does not read back as written.",
                                            "The disk or filesystem corrupted the output; check free space and retry.")


@contextlib.contextmanager
def staged_output(out: Path, force: bool) -> Iterator[Path]:
    """Yield a staging folder beside `out`; on success move it into place (replacing `out` when `force`), on any
    error or interrupt remove it. An existing `out` is moved aside first and only deleted after the swap."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    staging = out.parent / f".{out.name}.eagle-convert-{tag}.tmp"
    staging.mkdir()
    try:
        yield staging
        if out.exists():
            if not force:  # checked up front too; re-checked in case OUT appeared while we were writing
                raise FileExistsError(out)
            old = out.parent / f".{out.name}.eagle-convert-{tag}.old"
            out.rename(old)
            staging.rename(out)
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        else:
            staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
