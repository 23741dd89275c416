"""Byte ranges of big files (a safetensors header, one tensor) read without downloading the rest.

Range reads are cached under `$HF_HOME/eagle-convert/ranges/models--org--name/<sha>/<file>/<key>` (the key is the
tensor name, or `__header_len__` / `__header__`), written to a temporary file and renamed, and checked by size, so an
interrupted transfer leaves nothing behind and a second run fetches nothing. Offline (`HF_HUB_OFFLINE=1` or
`offline=True`) only the caches are read.

Own retries (ranged reads): EAGLE_CONVERT_HUB_RETRIES (default 5) attempts after the first, waiting
EAGLE_CONVERT_HUB_RETRY_WAIT (default 1 s) doubled each time up to 8x; a transfer cut mid-way resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx2  # huggingface_hub's HTTP client: what a dropped connection raises
import tqdm
from huggingface_hub import constants, hf_hub_url
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

from ..source import LocalSource
from .hub_errors import HubNetworkError, OfflineCacheMissError, RemoteSizeMismatchError, hub_errors
from .repos import RepoRef, bar_class, cache_root, cached_file, check_file, download, repo_folder


def range_cache_path(ref: RepoRef, path: str, key: str) -> Path:
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"bad path in repo: {path!r}")
    name = quote(key, safe="")
    if name.startswith("."):  # never ".", ".." or one of our hidden temporary files
        name = "%2E" + name[1:]
    if len(name) > 200:
        name = hashlib.sha256(key.encode()).hexdigest() + ".key"
    return cache_root() / "ranges" / repo_folder(ref.repo_id) / ref.commit_sha / path / name


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
    size = check_file(ref, path)
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
        with open(tmp, "wb") as out, bar_class(quiet)(total=length, desc=desc[-60:], unit="B", unit_scale=True,
                                                        unit_divisor=1024, leave=False) as bar:
            with hub_errors(ref.repo_id, ref.revision, path, offline=False):
                _fetch_range(ref, path, offset, length, out, bar)
        os.replace(tmp, entry)
    except _RangesIgnored:
        whole = download(ref, path, quiet=quiet)
        return LocalSource(whole.parent).read_range(whole.name, offset, length)
    finally:
        tmp.unlink(missing_ok=True)
    return _map(entry, length)

