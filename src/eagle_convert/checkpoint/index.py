"""A checkpoint as an index: its config and, for every tensor name, the file, dtype, shape and byte range that hold
it. Opening one reads the config, the index and safetensors headers (lazily, per file) and no tensor data."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import torch

from ..errors import CorruptCheckpointError, LayoutError, MissingTensorError
from ..io.digest import torch_zip_records
from ..io.safetensors import SAFETENSORS_DTYPES, nbytes_of
from ..io.source import (
    SAFETENSORS_DTYPE_BYTES,
    FileSource,
    LocalSource,
    find_weights,
    read_json,
    read_safetensors_header,
)
from .config_schema import check_config

assert set(SAFETENSORS_DTYPES) == set(SAFETENSORS_DTYPE_BYTES) and all(
    dtype.itemsize == SAFETENSORS_DTYPE_BYTES[code] for code, dtype in SAFETENSORS_DTYPES.items())


@dataclass(frozen=True)
class TensorRef:
    name: str
    file: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int | None  # absolute byte offset in a safetensors file; None in a pickle

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)

    def leaves(self) -> tuple[TensorRef, ...]:
        """The byte ranges read to produce it: itself (a gathered per-rank tensor has one per rank)."""
        return (self,)


def parse_safetensors_header(source: FileSource, rel: str) -> dict[str, TensorRef]:
    """Every tensor of a safetensors file, from its header (checked whole by read_safetensors_header first)."""
    header, data_start = read_safetensors_header(source, rel)
    return {name: TensorRef(name, rel, SAFETENSORS_DTYPES[entry["dtype"]], tuple(entry["shape"]),
                            data_start + entry["data_offsets"][0])
            for name, entry in header.items() if name != "__metadata__"}


class Checkpoint:
    """Config + lazy tensor index of one checkpoint folder (local or remote, through its FileSource)."""

    notes: tuple[str, ...] = ()  # what opening it found that the user should know (a per-rank target has some)
    stored_dtype: str | None = None  # the dtype its tensors hold, when that overrides the config's (per-rank saves)

    def __init__(self, source: FileSource):
        self.source = source
        if not source.exists("config.json"):
            raise LayoutError(f"{source.label} has no config.json.",
                              "Point to the folder that holds the model's config.json and weight files.")
        self.config = read_config(source)
        self.weight_format, self.weight_map, self.files = find_weights(source)
        self._headers: dict[str, dict[str, TensorRef]] = {}
        self._pickles: dict[str, dict[str, torch.Tensor]] = {}
        self._pickle_spans: dict[str, dict[str, tuple[int, int]]] = {}

    @property
    def label(self) -> str:
        return self.source.label

    def _refs_in(self, rel: str) -> dict[str, TensorRef]:
        if rel not in self._headers:
            if self.weight_format == "safetensors":
                self._headers[rel] = parse_safetensors_header(self.source, rel)
            else:
                self._headers[rel] = {name: TensorRef(name, rel, t.dtype, tuple(t.shape), None)
                                      for name, t in self.load_pickle(rel).items()}
        return self._headers[rel]

    def names(self) -> list[str]:
        if self.weight_map:
            return sorted(self.weight_map)
        return sorted(self._refs_in(self.files[0]))

    def has(self, name: str) -> bool:
        return name in self.weight_map if self.weight_map else name in self._refs_in(self.files[0])

    def file_of(self, name: str) -> str:
        """The file holding `name`, from the index alone (no header read)."""
        return self.weight_map.get(name, "") if self.weight_map else self.files[0]

    def ref(self, name: str) -> TensorRef:
        rel = self.weight_map.get(name) if self.weight_map else self.files[0]
        refs = self._refs_in(rel) if rel else {}
        if name not in refs:
            where = f"shard {rel}" if self.weight_map and rel else self.label
            raise MissingTensorError(f"Tensor {name!r} is not in {where}.",
                                     "The checkpoint is incomplete or not the model you meant: check the path.")
        return refs[name]

    def refs(self) -> dict[str, TensorRef]:
        return {name: self.ref(name) for name in self.names()}

    def span(self, ref: TensorRef) -> tuple[str, int, int] | None:
        """(path, offset, length): where `ref`'s bytes lie in a local file, when known."""
        if not isinstance(self.source, LocalSource):
            return None
        path = str(self.source.local_path(ref.file))
        if ref.offset is not None:
            return path, ref.offset, ref.nbytes
        self.load_pickle(ref.file)
        where = self._pickle_spans.get(ref.file, {}).get(ref.name)
        return (path, *where) if where else None

    def load_pickle(self, rel: str) -> dict[str, torch.Tensor]:
        """A `.bin` file, loaded with weights_only=True (never arbitrary unpickling) and mmap'd when the zip format
        allows, so its tensors are file-backed until used."""
        if rel not in self._pickles:
            path = self.source.local_path(rel)
            try:
                with warnings.catch_warnings():  # torch warns about odd pickles on stderr: our error says it all
                    warnings.simplefilter("ignore")
                    state, mapped = _torch_load(path)
            except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError... for bad files
                raise _pickle_refusal(self.source.describe(rel), exc) from exc
            if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
                state = state["state_dict"]
            if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
                raise CorruptCheckpointError(f"{self.source.describe(rel)} is not a flat dict of tensors.",
                                             "Re-save it as a plain state dict.")
            self._pickles[rel] = state
            self._pickle_spans[rel] = _mapped_spans(path, state) if mapped else {}
        return self._pickles[rel]


def _pickle_refusal(where: str, exc: Exception) -> CorruptCheckpointError:
    """Why a `.bin` did not load. torch's own message for a pickle holding objects advises re-running with
    weights_only=False, which runs whatever code the file holds: never repeated here, next to a possibly hostile
    file."""
    text = str(exc)
    if "Weights only load failed" not in text:
        return CorruptCheckpointError(
            f"{where} cannot be loaded safely ({type(exc).__name__}: {text.splitlines()[0] if text else ''}).",
            "It is corrupt or truncated: re-download it, or re-save it as a plain state dict of tensors.")
    found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    return CorruptCheckpointError(
        f"{where} cannot be loaded safely: it holds objects other than tensors"
        f"{f' (one built by `{found.group(1)}`)' if found else ''}, and eagle-convert only loads tensors (loading "
        "the objects would run code from the file).",
        "Obtain a safetensors copy of the checkpoint from its publisher, or re-save its tensors as safetensors with "
        "a tool you trust (only if you trust the file itself: loading it runs its code).")


def read_config(source: FileSource) -> dict:
    """config.json, every key eagle-convert reads checked for its JSON type (config_schema.py) before any reader
    sees it."""
    config = read_json(source, "config.json")
    check_config(config, source.describe("config.json"))
    return config


def config_dtype(config: dict) -> str | None:
    """The dtype a Hugging Face config names: `torch_dtype`, or `dtype` as transformers 5 writes it."""
    return config.get("torch_dtype") or config.get("dtype")


def _torch_load(path) -> tuple[object, bool]:
    """A `.bin` with weights_only=True, mmap'd when the zip format allows; and whether it was."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True), True
    except RuntimeError as exc:
        if "mmap" not in str(exc):
            raise
        return torch.load(path, map_location="cpu", weights_only=True), False  # legacy (non-zip) format


def _mapped_spans(path, state: dict[str, torch.Tensor]) -> dict[str, tuple[int, int]]:
    """(offset, length) in the file of each contiguous tensor of a torch zip loaded with mmap=True. Its storages are
    slices of one map of the whole file, so a storage's address is the map's base plus its record's offset: the base
    follows from the lowest storage and record, and is checked against every storage (else: no spans)."""
    records = {offset: n for offset, n in torch_zip_records(path) if n}
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state.values()
                if t.untyped_storage().nbytes()}
    if not storages or len(storages) != len(records):
        return {}
    base = min(storages) - min(records)
    if any(records.get(address - base) != n for address, n in storages.items()):
        return {}
    return {name: (t.data_ptr() - base, t.nbytes) for name, t in state.items()
            if t.is_contiguous() and t.untyped_storage().nbytes()}
