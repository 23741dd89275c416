"""Whether an output folder overlaps an input, judged by where the input files really are.

Comparing folder paths is not enough: a draft laid out like the Hugging Face cache is a folder of symlinks
(snapshots/<rev>/model.safetensors -> ../../blobs/<sha>), and `-o .../blobs --force` would replace the folder holding
the draft's real bytes. So every input file is resolved (symlinks followed), and a repo input counts as its whole
cache folder (the files a HubSource reads, io/hub/repos.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXISTS_HINT, OUT_OPTION, OutputPathError, option
from .source import LocalSource


@dataclass(frozen=True)
class Overlap:
    input_label: str  # the input as the user gave it
    file: str  # the input file (or folder) in the way, as the user would recognise it
    folder: Path  # the real folder it lives in: the output equals, contains or lies inside it


def input_locations(source, label: str) -> list[tuple[str, Path]]:
    """(the input file or folder, as the user would recognise it; the real folder it lives in) for every place
    `source`'s files live: a folder's own path, each of its files' real folders, a repo's cache folders."""
    if isinstance(source, LocalSource):
        places = []
        for rel in source.files():
            path = source.root / rel
            real = Path(os.path.realpath(path))
            shown = str(path) if real == path else f"{path} (really {real})"
            places += [(shown, path.parent), (shown, real.parent)]  # replacing either folder loses the file
        return places + [(label, source.root)]  # an empty folder still may not be written into (already resolved)
    ref = getattr(source, "ref", None)
    if ref is not None and hasattr(ref, "repo_id"):  # a HubSource: the files it reads are in the caches
        from .hub.repos import cache_folders

        return [(f"{ref.repo_id}, cached in {folder}", Path(os.path.realpath(folder))) for folder in cache_folders(ref)]
    return []


def find_overlap(out: Path, inputs: list[tuple[str, object]]) -> Overlap | None:
    """The first input whose real location the output folder (resolved) equals, contains or lies inside, so that
    writing or replacing (--force) the output would touch it. `inputs`: (label, FileSource) pairs."""
    out = Path(os.path.realpath(out))
    for label, source in inputs:
        for shown, folder in input_locations(source, label):
            if out == folder or out in folder.parents or folder in out.parents:
                return Overlap(label, shown, folder)
    return None


def check_out_path(out: Path, inputs: list, force: bool) -> None:
    """Refuse an output folder that would touch an input: by where the input files really are (symlinks followed,
    a repo's cache folders), since --force replaces the whole output folder. `inputs`: the opened inputs
    (checkpoint/open.py InputRef: a label and a checkpoint's source), of `convert` and `convert --mtp` alike."""
    out = out.resolve()
    overlap = find_overlap(out, [(ref.label, ref.checkpoint.source) for ref in inputs])
    if overlap is not None:
        raise OutputPathError(f"The output folder {out} overlaps the input {overlap.input_label}: "
                              f"{overlap.file} lives in {overlap.folder}, so writing the output (or replacing it "
                              f"with {option('force')}) would modify the input.",
                              f"Pick another {OUT_OPTION} folder, outside every input and its real files; inputs are "
                              "never modified.")
    if out.exists() and not force:
        raise OutputPathError(f"{out} already exists.", EXISTS_HINT)
