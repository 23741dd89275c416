"""Everything the converter needs from the Hugging Face Hub, only through `huggingface_hub`: resolve a repo id and a
revision to a commit sha and its file sizes, download small files into the standard cache (pinned to that sha), and
read byte ranges of big files (a safetensors header, one tensor) without downloading the rest.

Range reads are cached under `$HF_HOME/eagle-convert/ranges/models--org--name/<sha>/<file>/<key>` (the key is the
tensor name, or `__header_len__` / `__header__`), written to a temporary file and renamed, and checked by size, so an
interrupted transfer leaves nothing behind and a second run fetches nothing. Offline (`HF_HUB_OFFLINE=1` or
`offline=True`) only the caches are read. huggingface_hub reads HF_ENDPOINT / HF_HOME / HF_HUB_OFFLINE when it is
imported: import this module late (after the CLI has parsed its options), or run it in a fresh process.

Own retries (ranged reads): EAGLE_CONVERT_HUB_RETRIES (default 5) attempts after the first, waiting
EAGLE_CONVERT_HUB_RETRY_WAIT (default 1 s) doubled each time up to 8x; a transfer cut mid-way resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx2  # huggingface_hub's HTTP client: what a dropped connection raises
import tqdm
from huggingface_hub import HfApi, constants, hf_hub_download, hf_hub_url, try_to_load_from_cache
from huggingface_hub import errors as hf
from huggingface_hub.utils import are_progress_bars_disabled, build_hf_headers, hf_raise_for_status, http_stream_backoff

from ..errors import HubError
from . import source as source_module
from .source import HEADER_KEY, HEADER_LEN_KEY, LocalSource  # noqa: F401  (HEADER_*: the cache keys of a header)

SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class RepoNotFoundError(HubError):
    """No such repo (or a private one the token cannot see)."""


class GatedRepoError(HubError):
    """A gated repo, and no token with access to it."""


class RevisionNotFoundError(HubError):
    """The repo exists but the branch, tag or commit does not."""


class RemoteFileNotFoundError(HubError):
    """The repo has no such file at this commit."""


class HubNetworkError(HubError):
    """The Hub could not be reached, or a transfer kept failing (after retries)."""


class OfflineCacheMissError(HubError):
    """Offline, and what is needed is not in the cache."""


class RemoteSizeMismatchError(HubError):
    """The bytes received do not match what the listing or the safetensors header promised."""


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


def _repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def _listing_paths(repo_id: str, revision: str, sha: str | None) -> tuple[Path, Path | None]:
    base = cache_root() / "repos" / _repo_folder(repo_id)
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
    storage = Path(constants.HF_HUB_CACHE) / _repo_folder(repo_id)
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
            with _hub_errors(repo_id, revision, "the file listing", offline=False):
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
            f"{cache_root() / 'repos' / _repo_folder(repo_id)} or "
            f"{Path(constants.HF_HUB_CACHE) / _repo_folder(repo_id)}).",
            "Run once online (without --offline and HF_HUB_OFFLINE=1) to fill the cache.")
    return RepoRef(repo_id, revision, cached[0], cached[1], token, offline=True, from_cache=True)


# ---- errors ---------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _hub_errors(repo_id: str, revision: str, what: str, *, offline: bool):
    """Turn huggingface_hub / transport exceptions into our typed, one-paragraph errors."""
    where = f"{repo_id}@{revision}"
    try:
        yield
    except HubError:
        raise
    except hf.GatedRepoError as exc:  # a subclass of RepositoryNotFoundError: first
        raise GatedRepoError(f"{repo_id} is a gated repo and reading {what} was refused.",
                             f"Request access on {constants.ENDPOINT}/{repo_id}, then pass --token or set HF_TOKEN "
                             "(or run `hf auth login`).") from exc
    except hf.RepositoryNotFoundError as exc:
        raise RepoNotFoundError(f"Repository {repo_id} was not found on {constants.ENDPOINT}.",
                                "Check the spelling (org/name); if it is private, pass --token or set HF_TOKEN."
                                ) from exc
    except hf.RevisionNotFoundError as exc:
        raise RevisionNotFoundError(f"Revision {revision!r} does not exist in {repo_id}.",
                                    "Pass an existing branch, tag or full commit sha with --revision.") from exc
    except hf.RemoteEntryNotFoundError as exc:
        raise RemoteFileNotFoundError(f"{what} is not in {where}.", "Check the repo id and revision.") from exc
    except (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled) as exc:
        if offline or constants.is_offline_mode():
            raise OfflineCacheMissError(
                f"Offline mode: {what} of {where} is not in the cache ({constants.HF_HUB_CACHE}).",
                "Run once online (without --offline and HF_HUB_OFFLINE=1) to fetch it.") from exc
        raise HubNetworkError(f"Could not reach {constants.ENDPOINT} for {what} of {where}, and it is not cached.",
                              "Check your connection (and HF_ENDPOINT), then run again.") from exc
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status >= 500:
            raise HubNetworkError(f"The Hub answered HTTP {status} for {what} of {where}.",
                                  "The Hub is having trouble: run again later.") from exc
        if status == 401:
            raise HubError(f"The Hub rejected the token sent for {what} of {where} (HTTP 401).",
                           "Pass a valid token with --token or HF_TOKEN, or unset it to read public repos.") from exc
        if status == 416:
            raise RemoteSizeMismatchError(
                f"{what} of {where} is shorter than its listing says (HTTP 416).",
                "The file on the Hub is truncated or changed: report it to the repo owner.") from exc
        raise HubError(f"The Hub answered HTTP {status} for {what} of {where}.",
                       "Run again later; if it persists, check your token and HF_ENDPOINT.") from exc
    except httpx2.TransportError as exc:
        raise HubNetworkError(f"Network error while fetching {what} of {where}: {type(exc).__name__}: {exc}.",
                              "Run again: completed files stay cached, so only what is missing is fetched.") from exc
    except OSError as exc:  # hf_hub_download's size check; anything else (a full disk...) is not a Hub problem
        if "Consistency check failed" not in str(exc):
            raise
        raise RemoteSizeMismatchError(f"{what} of {where} does not have the size the Hub announced.",
                                      "Run again; if it persists the file on the Hub is inconsistent.") from exc


# ---- progress -------------------------------------------------------------------------------------------------------
def bars_off(quiet: bool = False) -> bool:
    return quiet or not sys.stderr.isatty() or are_progress_bars_disabled()


def _bar_class(quiet: bool) -> type[tqdm.tqdm]:
    off = bars_off(quiet)

    class Bar(tqdm.tqdm):  # a plain tqdm: huggingface_hub then leaves `disable` to us
        def __init__(self, *args, **kwargs):
            kwargs.update(disable=off, file=sys.stderr)
            super().__init__(*args, **kwargs)

    return Bar


# ---- whole files ----------------------------------------------------------------------------------------------------
def _check_file(ref: RepoRef, path: str) -> int:
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
    _check_file(ref, path)
    with _hub_errors(ref.repo_id, ref.revision, path, offline=ref.offline):
        return Path(hf_hub_download(ref.repo_id, path, revision=ref.commit_sha, token=ref.token,
                                    local_files_only=ref.offline, tqdm_class=_bar_class(quiet)))


# ---- byte ranges ----------------------------------------------------------------------------------------------------
def range_cache_path(ref: RepoRef, path: str, key: str) -> Path:
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"bad path in repo: {path!r}")
    name = quote(key, safe="")
    if name.startswith("."):  # never ".", ".." or one of our hidden temporary files
        name = "%2E" + name[1:]
    if len(name) > 200:
        name = hashlib.sha256(key.encode()).hexdigest() + ".key"
    return cache_root() / "ranges" / _repo_folder(ref.repo_id) / ref.commit_sha / path / name


def is_cached(ref: RepoRef, path: str, length: int, *, key: str) -> bool:
    """Whether read_range would be served without a request (the range cache, or the whole file cached)."""
    entry = range_cache_path(ref, path, key)
    return (entry.is_file() and entry.stat().st_size == length) or cached_file(ref, path) is not None


def _map(path: Path, length: int) -> memoryview | bytearray:
    if length == 0:
        return bytearray()
    with open(path, "rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))


def _retry_settings() -> tuple[int, float]:
    env = os.environ
    return int(env.get("EAGLE_CONVERT_HUB_RETRIES", "5")), float(env.get("EAGLE_CONVERT_HUB_RETRY_WAIT", "1"))


class _RangesIgnored(Exception):
    pass


def _fetch_range(ref: RepoRef, path: str, offset: int, length: int, out, bar: tqdm.tqdm) -> None:
    """Write bytes [offset, offset + length) of `path` to `out`, resuming after a dropped connection."""
    retries, wait = _retry_settings()
    url = hf_hub_url(ref.repo_id, path, revision=ref.commit_sha)
    headers = build_hf_headers(token=ref.token)
    got, failures = 0, 0
    while got < length:
        first, last = offset + got, offset + length - 1
        before = got
        try:
            with http_stream_backoff("GET", url, headers={**headers, "Range": f"bytes={first}-{last}"},
                                     timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT, max_retries=retries,
                                     base_wait_time=wait, max_wait_time=8 * wait, retry_on_exceptions=()) as r:
                hf_raise_for_status(r)
                if r.status_code != 206:
                    raise _RangesIgnored
                m = re.match(r"bytes (\d+)-(\d+)/", r.headers.get("Content-Range", ""))
                if m is None or int(m.group(1)) != first:
                    raise RemoteSizeMismatchError(
                        f"{ref.repo_id}/{path}: asked for bytes {first}-{last}, the server sent "
                        f"{r.headers.get('Content-Range')!r}.", "Run again; if it persists, report the server.")
                for chunk in r.iter_bytes():  # as received: a cut keeps what arrived
                    chunk = chunk[: length - got]
                    out.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
            if got < length:
                raise RemoteSizeMismatchError(
                    f"{ref.repo_id}/{path} (commit {ref.commit_sha[:12]}) ended early: bytes "
                    f"{offset}..{offset + length} were needed, {got} of them arrived.",
                    "The file is shorter than its listing or safetensors header says: it is truncated or corrupt.")
        except httpx2.TransportError as exc:
            failures = 0 if got > before else failures + 1
            if failures > retries:
                raise HubNetworkError(
                    f"Network error while fetching {path} of {ref.repo_id}: {type(exc).__name__}: {exc} "
                    f"({got} of {length} bytes after {retries} retries).",
                    "Run again: nothing partial was kept, completed tensors stay cached.") from exc
            time.sleep(min(8 * wait, wait * 2 ** max(failures - 1, 0)))


def read_range(ref: RepoRef, path: str, offset: int, length: int, *, key: str | None = None,
               quiet: bool = False) -> memoryview | bytearray:
    """Bytes [offset, offset + length) of `path`: from the range cache, else from the whole file if it is cached,
    else one ranged GET (stored atomically under `key`, default "@offset+length"). Offline: caches only.
    A server that ignores Range gets the whole file downloaded (hf_hub_download) instead."""
    size = _check_file(ref, path)
    if offset < 0 or length < 0 or offset + length > size:
        raise RemoteSizeMismatchError(
            f"{ref.repo_id}/{path} has {size} bytes; bytes {offset}..{offset + length} were asked.",
            "The safetensors header disagrees with the file size: the file is corrupt.")
    entry = range_cache_path(ref, path, key or f"@{offset}+{length}")
    if entry.is_file():
        if entry.stat().st_size == length:
            return _map(entry, length)
        entry.unlink()
    whole = cached_file(ref, path)
    if whole is not None:
        return LocalSource(whole.parent).read_range(whole.name, offset, length)
    if ref.offline:
        raise OfflineCacheMissError(
            f"Offline mode: {length} bytes of {path} ({key or 'range'}) of {ref.repo_id}@{ref.commit_sha[:12]} are "
            f"not in the cache ({entry.parent}).",
            "Run once online (without --offline and HF_HUB_OFFLINE=1) to fetch them.")
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.with_name(f".{entry.name}.{uuid.uuid4().hex[:8]}.tmp")
    desc = f"{path}:{key}" if key else path
    try:
        with open(tmp, "wb") as out, _bar_class(quiet)(total=length, desc=desc[-60:], unit="B", unit_scale=True,
                                                        unit_divisor=1024, leave=False) as bar:
            with _hub_errors(ref.repo_id, ref.revision, path, offline=False):
                _fetch_range(ref, path, offset, length, out, bar)
        os.replace(tmp, entry)
    except _RangesIgnored:
        whole = download(ref, path, quiet=quiet)
        return LocalSource(whole.parent).read_range(whole.name, offset, length)
    finally:
        tmp.unlink(missing_ok=True)
    return _map(entry, length)


def read_safetensors_header(ref: RepoRef, path: str, *, quiet: bool = False) -> tuple[dict, int]:
    """The parsed JSON header of a safetensors file and the absolute offset where its data starts, for 8 + header
    length bytes (cached like tensors, under the keys checkpoint.py uses)."""
    return source_module.read_safetensors_header(HubSource(ref, quiet=quiet), path)


# ---- a FileSource over a repo (see io/source.py) --------------------------------------------------------------------
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
        return _check_file(self.ref, rel)

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


def cache_folders(ref: RepoRef) -> list[Path]:
    """Where this repo's files live on disk: huggingface_hub's cache folder (snapshots are symlinks into its blobs/)
    and our listing and range caches. An output folder must stay out of all of them (converter.check_out_path)."""
    folder = _repo_folder(ref.repo_id)
    return [Path(constants.HF_HUB_CACHE) / folder, cache_root() / "repos" / folder, cache_root() / "ranges" / folder]
