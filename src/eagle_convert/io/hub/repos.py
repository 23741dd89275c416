"""Repo resolution and whole files: a repo id and a revision to a commit sha and its file sizes (the listing,
remembered under `$HF_HOME/eagle-convert/repos/` so that offline runs resolve the same), small files downloaded into
the standard cache pinned to that sha, and where a repo's files live on disk. Offline (`HF_HUB_OFFLINE=1` or
`offline=True`) only the caches are read."""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import tqdm
from huggingface_hub import HfApi, constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.utils import are_progress_bars_disabled

from ...errors import HubError
from .hub_errors import HubNetworkError, OfflineCacheMissError, RemoteFileNotFoundError, hub_errors

SHA_RE = re.compile(r"^[0-9a-f]{40}$")


# ---- repo resolution ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RepoRef:
    repo_id: str
    revision: str  # as asked ("main" when none was given)
    commit_sha: str
    files: dict[str, int]  # path in repo -> size in bytes
    token: str | None = field(default=None, repr=False, compare=False)
    offline: bool = False  # only caches are read
    from_cache: bool = False  # resolved from our cached listing (offline, or the Hub was unreachable)


def is_offline(offline: bool | None = None) -> bool:
    return bool(offline) or constants.is_offline_mode()


def cache_root() -> Path:
    return Path(constants.HF_HOME) / "eagle-convert"


def repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def _listing_paths(repo_id: str, revision: str, sha: str | None) -> tuple[Path, Path | None]:
    base = cache_root() / "repos" / repo_folder(repo_id)
    return base / "refs" / quote(revision, safe=""), (base / "trees" / f"{sha}.json") if sha else None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _cached_listing(repo_id: str, revision: str) -> tuple[str, dict[str, int]] | None:
    ref_path, _ = _listing_paths(repo_id, revision, None)
    sha = revision if SHA_RE.match(revision) else (ref_path.read_text().strip() if ref_path.is_file() else None)
    tree = _listing_paths(repo_id, revision, sha)[1]
    if sha is None or tree is None or not tree.is_file():
        return None
    return sha, {k: int(v) for k, v in json.loads(tree.read_text()).items()}


def _hf_cache_listing(repo_id: str, revision: str) -> tuple[str, dict[str, int]] | None:
    """What huggingface_hub's own cache holds of this revision (e.g. after `hf download`): the files present."""
    storage = Path(constants.HF_HUB_CACHE) / repo_folder(repo_id)
    ref_path = storage / "refs" / revision
    sha = revision if SHA_RE.match(revision) else (ref_path.read_text().strip() if ref_path.is_file() else None)
    snapshot = storage / "snapshots" / sha if sha else None
    if snapshot is None or not snapshot.is_dir():
        return None
    return sha, {p.relative_to(snapshot).as_posix(): p.stat().st_size for p in snapshot.rglob("*") if p.is_file()}


def resolve_repo(repo_id: str, revision: str | None = None, token: str | None = None,
                 offline: bool | None = None) -> RepoRef:
    """The commit sha of `revision` (default "main") and every file's size: one repo-info request (`?blobs=True`),
    remembered under cache_root() so that offline runs, and runs while the Hub is unreachable, resolve the same."""
    revision = revision or "main"
    offline = is_offline(offline)
    if not offline:
        try:
            with hub_errors(repo_id, revision, "the file listing", offline=False):
                info = HfApi().model_info(repo_id, revision=revision, files_metadata=True, token=token)
        except HubNetworkError:
            cached = _cached_listing(repo_id, revision)
            if cached is None:
                raise
            return RepoRef(repo_id, revision, cached[0], cached[1], token, offline=False, from_cache=True)
        files = {s.rfilename: int(s.size) for s in info.siblings or [] if s.size is not None}
        if info.sha is None or len(files) != len(info.siblings or []):
            raise HubError(f"{constants.ENDPOINT} returned no commit sha or file sizes for {repo_id}@{revision}.",
                           "Check HF_ENDPOINT: it must point to the Hugging Face Hub or a compatible server.")
        ref_path, tree_path = _listing_paths(repo_id, revision, info.sha)
        _write_atomic(tree_path, json.dumps(files, sort_keys=True).encode())
        if revision != info.sha:
            _write_atomic(ref_path, info.sha.encode())
        return RepoRef(repo_id, revision, info.sha, files, token)
    cached = _cached_listing(repo_id, revision) or _hf_cache_listing(repo_id, revision)
    if cached is None:
        raise OfflineCacheMissError(
            f"Offline mode: {repo_id}@{revision} is not in the cache (nothing under "
            f"{cache_root() / 'repos' / repo_folder(repo_id)} or "
            f"{Path(constants.HF_HUB_CACHE) / repo_folder(repo_id)}).",
            "Run once online (without --offline and HF_HUB_OFFLINE=1) to fill the cache.")
    return RepoRef(repo_id, revision, cached[0], cached[1], token, offline=True, from_cache=True)


# ---- progress -------------------------------------------------------------------------------------------------------
def bars_off(quiet: bool = False) -> bool:
    return quiet or not sys.stderr.isatty() or are_progress_bars_disabled()


def bar_class(quiet: bool) -> type[tqdm.tqdm]:
    off = bars_off(quiet)

    class Bar(tqdm.tqdm):  # a plain tqdm: huggingface_hub then leaves `disable` to us
        def __init__(self, *args, **kwargs):
            kwargs.update(disable=off, file=sys.stderr)
            super().__init__(*args, **kwargs)

    return Bar


# ---- whole files ----------------------------------------------------------------------------------------------------
def check_file(ref: RepoRef, path: str) -> int:
    if path not in ref.files:
        raise RemoteFileNotFoundError(f"{path} is not in {ref.repo_id}@{ref.revision} (commit {ref.commit_sha[:12]}).",
                                      "Check the repo id and revision.")
    return ref.files[path]


def cached_file(ref: RepoRef, path: str) -> Path | None:
    """The whole file if it is already in the standard cache at this commit, else None (no request)."""
    found = try_to_load_from_cache(ref.repo_id, path, revision=ref.commit_sha)
    return Path(found) if isinstance(found, str) else None


def download(ref: RepoRef, path: str, *, quiet: bool = False) -> Path:
    """The whole file, through hf_hub_download into the standard cache, pinned to the commit: once it is cached,
    no request at all."""
    check_file(ref, path)
    with hub_errors(ref.repo_id, ref.revision, path, offline=ref.offline):
        return Path(hf_hub_download(ref.repo_id, path, revision=ref.commit_sha, token=ref.token,
                                    local_files_only=ref.offline, tqdm_class=bar_class(quiet)))


def cache_folders(ref: RepoRef) -> list[Path]:
    """Where this repo's files live on disk: huggingface_hub's cache folder (snapshots are symlinks into its blobs/)
    and our listing and range caches. An output folder must stay out of all of them (conversion/tensor_checks.py)."""
    folder = repo_folder(ref.repo_id)
    return [Path(constants.HF_HUB_CACHE) / folder, cache_root() / "repos" / folder, cache_root() / "ranges" / folder]
