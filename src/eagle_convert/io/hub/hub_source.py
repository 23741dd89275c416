"""A FileSource (io/source.py) over the files of one repo at one commit, and opening one from a repo id."""

from __future__ import annotations

from pathlib import Path

from .. import source as source_module
from ..source import LocalSource
from .ranges import is_cached, read_range
from .repos import RepoRef, cached_file, check_file, download, resolve_repo


def read_safetensors_header(ref: RepoRef, path: str, *, quiet: bool = False) -> tuple[dict, int]:
    """The parsed JSON header of a safetensors file and the absolute offset where its data starts, for 8 + header
    length bytes (cached like tensors, under the keys checkpoint.py uses)."""
    return source_module.read_safetensors_header(HubSource(ref, quiet=quiet), path)


class HubSource:
    """Files of one repo at one commit. Keyed reads (safetensors headers and tensors) are byte ranges when `ranges`
    is set (a target), whole-file downloads otherwise (a draft); unkeyed reads (JSON) download the file.
    `fetched` counts the file bytes this source pulled over the network, per file."""

    def __init__(self, ref: RepoRef, *, ranges: bool = True, quiet: bool = False):
        self.ref, self.ranges, self.quiet = ref, ranges, quiet
        self.label = ref.repo_id
        self.fetched: dict[str, int] = {}
        self._local: dict[str, LocalSource] = {}

    def exists(self, rel: str) -> bool:
        return rel in self.ref.files

    def size(self, rel: str) -> int:
        return check_file(self.ref, rel)

    def local_path(self, rel: str) -> Path:
        fetch = cached_file(self.ref, rel) is None
        path = download(self.ref, rel, quiet=self.quiet)
        if fetch:
            self.fetched[rel] = self.fetched.get(rel, 0) + self.size(rel)
        return path

    def warm(self, rel: str, offset: int, length: int) -> None:
        pass  # fetched when read: the network, not the disk, is what a remote read waits on

    def files(self) -> list[str]:
        return sorted(self.ref.files)

    def read_range(self, rel: str, offset: int, length: int, *, key: str | None = None) -> memoryview | bytearray:
        if key is None or not self.ranges:
            if rel not in self._local:
                path = self.local_path(rel)
                self._local[rel] = LocalSource(path.parent)
            return self._local[rel].read_range(Path(rel).name, offset, length)
        fetch = not is_cached(self.ref, rel, length, key=key)
        data = read_range(self.ref, rel, offset, length, key=key, quiet=self.quiet)
        if fetch:
            self.fetched[rel] = self.fetched.get(rel, 0) + length
        return data

    def describe(self, rel: str) -> str:
        return f"hf://{self.ref.repo_id}@{self.ref.commit_sha[:12]}/{rel}"

    def revision(self) -> str | None:
        return self.ref.commit_sha


def open_repo_source(repo_id: str, *, revision: str | None = None, token: str | None = None,
                     offline: bool | None = None, role: str = "draft", quiet: bool = False,
                     ranges: bool | None = None) -> tuple[HubSource, list[str]]:
    """The files of a repo id at one commit (byte ranges for a target, whole files for a draft), and the notes the
    user sees about how it was resolved. resolve.open_input builds the checkpoint on it."""
    ref = resolve_repo(repo_id, revision, token, offline)
    notes = [f"{repo_id}@{ref.revision} resolved from the local cache (commit {ref.commit_sha})"
             ] if ref.from_cache else []
    return HubSource(ref, ranges=(role == "target") if ranges is None else ranges, quiet=quiet), notes

