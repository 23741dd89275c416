"""Where maps are stored, as a registry: each producer's and consumer's file format, read and written losslessly
(a map read and written back is tensor-equal, dtypes included: d2t int64, t2d bool, SGLang's ids int64).

Reading never runs pickled code: `.pt` files through `torch.load(weights_only=True)`, `.npy` through
`numpy.load(allow_pickle=False)`. Writing `.pt`/`.npy` is what the consumers read (SpecForge, ModelOpt and SGLang
load `torch.load` files, speculators `.npy`); our own output is safetensors."""

from __future__ import annotations

import re
import tokenize
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy
import torch

from ..io.write import OutTensor, write_safetensors
from .check import ids_facts
from .map import VocabMap
from .rules import FORMAT_NAMES, VocabMapError


@dataclass(frozen=True)
class StoredMap:
    """A map as a file holds it, before any check: SGLang's ids are turned into offsets here (d2t = ids - arange)."""
    d2t: torch.Tensor
    t2d: torch.Tensor | None
    format: str
    files: tuple[Path, ...]


@dataclass(frozen=True)
class StorageFormat:
    name: str
    description: str
    ascending_only: bool  # its consumers need ascending target ids (SpecForge's compact teacher; speculators sorts)
    needs_vocab: bool  # it stores t2d, so the target vocabulary size must be known to write it
    file_names: Callable[[int], tuple[str, ...]]
    write: Callable[[VocabMap, Path], None]  # into an (empty, staged) folder
    read: Callable[[Path], StoredMap]


def _refuse_empty(path: Path, producer: str) -> None:
    """A zero-byte file (an interrupted save or copy) would otherwise surface as the loader's own puzzle."""
    if path.stat().st_size == 0:
        raise VocabMapError(f"{path} is empty (0 bytes): no map was saved in it (an interrupted save or copy?).",
                            f"Copy the file again from where {producer} wrote it, or rebuild the map with "
                            "`eagle-convert vocab-map build`.")


def _torch_load(path: Path):
    _refuse_empty(path, "its producer")
    try:
        with warnings.catch_warnings():  # torch asks the user to file an issue about a pickle it may then refuse:
            # our paragraph below (or the map's own check) says what is wrong with the file, in one place
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - a refused pickle, a corrupt zip: one typed error either way
        said = str(error).split(". ")[0].strip() or type(error).__name__  # torch's runs on for a paragraph
        raise VocabMapError(f"{path} cannot be read as a tensor file with torch.load(weights_only=True): {said}.",
                            "Map files are read without running pickled code; give the file the producer wrote.") \
            from error


def _npy_load(path: Path) -> torch.Tensor:
    _refuse_empty(path, "speculators")
    try:
        return torch.from_numpy(numpy.load(path, allow_pickle=False))
    # TypeError: an array of strings, not numbers; TokenError: a header numpy's own tokenizer cannot scan (flipped bits)
    except (OSError, ValueError, EOFError, TypeError, tokenize.TokenError) as error:
        said = str(error).split(". ")[0].strip() or type(error).__name__
        raise VocabMapError(f"{path} is not a plain .npy array of numbers: {said}.",
                            "speculators writes d2t-N.npy / t2d-N.npy as int64 / bool arrays.") from error


def _read_specforge(path: Path) -> StoredMap:
    data = _torch_load(path)
    if not isinstance(data, dict) or "d2t" not in data:
        raise VocabMapError(f"{path} holds no {{'d2t', 't2d'}} dict (SpecForge's vocab_mapping.pt).",
                            "Pass --from with the format the file is in.")
    for key in ("d2t", "t2d"):
        if not isinstance(data.get(key), (torch.Tensor, type(None))) or (key == "d2t" and data[key] is None):
            raise VocabMapError(f"{path}: its {key!r} is a {type(data[key]).__name__}, not a tensor.",
                                "SpecForge saves {'d2t': int64 tensor, 't2d': bool tensor}; give the file it wrote.")
    return StoredMap(data["d2t"], data.get("t2d"), "specforge", (path,))


def _write_specforge(vmap: VocabMap, folder: Path) -> None:
    torch.save({"d2t": vmap.d2t(), "t2d": vmap.t2d()}, folder / _names("specforge", vmap.draft_vocab_size)[0])


def _speculators_pair(path: Path) -> tuple[Path, Path]:
    match = re.fullmatch(r"(d2t|t2d)(-\d+)?\.npy", path.name)
    if not match:
        raise VocabMapError(f"{path.name} is not named d2t-N.npy or t2d-N.npy as speculators names them.",
                            "Give the d2t-N.npy file (its t2d-N.npy beside it).")
    suffix = match.group(2) or ""
    return path.with_name(f"d2t{suffix}.npy"), path.with_name(f"t2d{suffix}.npy")


def _read_speculators(path: Path) -> StoredMap:
    d2t_path, t2d_path = _speculators_pair(path)
    if not d2t_path.is_file():
        raise VocabMapError(f"{d2t_path} is missing: a t2d without its d2t cannot place the draft ids.",
                            "Give the folder both files speculators wrote.")
    t2d = _npy_load(t2d_path) if t2d_path.is_file() else None
    return StoredMap(_npy_load(d2t_path), t2d, "speculators", (d2t_path,) + ((t2d_path,) if t2d is not None else ()))


def _write_speculators(vmap: VocabMap, folder: Path) -> None:
    d2t_name, t2d_name = _names("speculators", vmap.draft_vocab_size)
    numpy.save(folder / d2t_name, vmap.d2t().numpy())
    numpy.save(folder / t2d_name, vmap.t2d().numpy())


def _ids_from_list(path: Path, data: list) -> torch.Tensor:
    """A Python list of ids (SGLang's own format): ints only; a float would be truncated by SGLang's
    torch.tensor(..., dtype=int64), a bool is a mask entry, not an id."""
    odd = [i for i in data if not isinstance(i, int) or isinstance(i, bool)]
    if odd:
        kinds = ", ".join(sorted({type(i).__name__ for i in odd}))
        raise VocabMapError(f"{path} holds a list of {len(data)} values, {len(odd)} of them {kinds} (e.g. "
                            f"{odd[0]!r}): a list of integer target ids was expected.",
                            "Save the target ids as Python ints or an int64 tensor (SGLang's loader would silently "
                            "truncate a float to an id and read True as id 1), or rebuild the map with "
                            "`eagle-convert vocab-map build`.")
    huge = next((i for i in data if not -2**63 <= i < 2**63), None)
    if huge is not None:  # torch.tensor would escape as "Overflow when unpacking long long"
        raise VocabMapError(f"{path} holds an id of {huge.bit_length()} bits, past int64: no vocabulary has such a "
                            "token.", "Save the target ids the map was built from, or rebuild the map with "
                            "`eagle-convert vocab-map build`.")
    return torch.tensor(data, dtype=torch.int64)


def _one_tensor(path: Path, what: str) -> torch.Tensor:
    data = _torch_load(path)
    if isinstance(data, list):
        data = _ids_from_list(path, data)
    if not isinstance(data, torch.Tensor):
        raise VocabMapError(f"{path} holds a Python {type(data).__name__}, not {what}.",
                            "Pass --from with the format the file is in.")
    return data


def _read_modelopt(path: Path) -> StoredMap:
    return StoredMap(_one_tensor(path, "a d2t tensor (ModelOpt's d2t.pt)"), None, "modelopt", (path,))


def _write_modelopt(vmap: VocabMap, folder: Path) -> None:
    torch.save(vmap.d2t(), folder / _names("modelopt", vmap.draft_vocab_size)[0])


def _read_sglang(path: Path) -> StoredMap:
    ids = _one_tensor(path, "a list or tensor of hot target ids (SGLang's token map)")
    return StoredMap(ids_facts(str(path), ids, None).d2t, None, "sglang", (path,))  # odd ids: the check names them


def _write_sglang(vmap: VocabMap, folder: Path) -> None:
    torch.save(vmap.ids_tensor(), folder / _names("sglang", vmap.draft_vocab_size)[0])


def _read_safetensors(path: Path) -> StoredMap:
    from safetensors import SafetensorError, safe_open

    _refuse_empty(path, "its producer")
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            if "d2t" not in keys:
                raise VocabMapError(f"{path} has no top-level d2t tensor.",
                                    "A head's folder is read by `vocab-map check HEAD`; give a map file here.")
            return StoredMap(f.get_tensor("d2t"), f.get_tensor("t2d") if "t2d" in keys else None, "safetensors",
                             (path,))
    except SafetensorError as error:
        raise VocabMapError(f"{path} is not a readable safetensors file: {error}.", "Give an intact file.") from error


def write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Through io/'s verified safetensors writer (each tensor reloaded and compared byte for byte)."""
    write_safetensors(path, [OutTensor(k, v.dtype, tuple(v.shape)) for k, v in tensors.items()],
                      lambda t: tensors[t.name])


def _write_safetensors(vmap: VocabMap, folder: Path) -> None:
    write_tensors(folder / _names("safetensors", vmap.draft_vocab_size)[0], {"d2t": vmap.d2t(), "t2d": vmap.t2d()})


FORMATS: dict[str, StorageFormat] = {f.name: f for f in (
    StorageFormat("specforge", "SpecForge vocab_mapping.pt: {'d2t': int64 offsets, 't2d': bool[config vocab]}", True,
                  True, lambda n: (f"vocab_mapping-{n}.pt",), _write_specforge, _read_specforge),
    StorageFormat("speculators", "speculators d2t-N.npy (int64 offsets) and t2d-N.npy (bool[config vocab])", True,
                  True, lambda n: (f"d2t-{n}.npy", f"t2d-{n}.npy"), _write_speculators, _read_speculators),
    StorageFormat("modelopt", "ModelOpt d2t.pt: the int64 offsets alone, in any order, no t2d", False, False,
                  lambda n: (f"d2t-{n}.pt",), _write_modelopt, _read_modelopt),
    StorageFormat("sglang", "SGLang --speculative-token-map: the hot target ids (int64), in draft order", False,
                  False, lambda n: (f"token_map-{n}.pt",), _write_sglang, _read_sglang),
    StorageFormat("safetensors", "safetensors with top-level d2t (int64 offsets) and t2d (bool[config vocab])",
                  False, True, lambda n: (f"vocab_map-{n}.safetensors",), _write_safetensors, _read_safetensors),
)}
if tuple(FORMATS) != FORMAT_NAMES:  # the CLI's torch-free list of choices (rules.py) must be this registry's
    raise AssertionError(f"vocab/rules.py FORMAT_NAMES {FORMAT_NAMES} != the registry's {tuple(FORMATS)}")
DEFAULT_FORMAT = {"specforge": "specforge", "speculators": "speculators", "eagle": "specforge",
                  "modelopt": "modelopt", "nemo": "safetensors"}


def format_for(name: str) -> StorageFormat:
    if name not in FORMATS:
        raise VocabMapError(f"Unknown --format {name!r}.", f"Use one of: {', '.join(FORMATS)}.")
    return FORMATS[name]


def _names(name: str, n: int) -> tuple[str, ...]:
    return FORMATS[name].file_names(n)


def detect_format(path: Path) -> str:
    """The format a file is in, from its name and (for .pt) its content; ambiguous files need --from."""
    if path.suffix == ".npy":
        return "speculators"
    if path.suffix == ".safetensors":
        return "safetensors"
    data = _torch_load(path)
    if isinstance(data, dict):
        return "specforge"
    if isinstance(data, list):
        return "sglang"
    if not isinstance(data, torch.Tensor):
        raise VocabMapError(f"{path} holds a Python {type(data).__name__}, not a map: a tensor or list of ids, or "
                            "SpecForge's {'d2t', 't2d'} dict, was expected.", "Give the map file its producer wrote.")
    if path.name.startswith("d2t"):
        return "modelopt"
    if re.search(r"token_map|freq|hot", path.name):
        return "sglang"
    raise VocabMapError(f"{path} holds one tensor, which could be ModelOpt's d2t offsets or SGLang's target ids.",
                        "Pass --from modelopt or --from sglang.")


def read_stored(path: Path, fmt: str | None = None) -> StoredMap:
    if not path.is_file():
        raise VocabMapError(f"{path} is not a file.", "Give a map file (a head's folder: use --apply-to / check).")
    return format_for(fmt or detect_format(path)).read(path)
