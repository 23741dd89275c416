"""A Hugging Face Hub-compatible HTTP server for tests: started in-process on 127.0.0.1, it serves model repos from a
folder and counts every byte it sends, so tests can assert exactly what a client fetched.

Layout: `root/<org>/<name>/` holds the files of branch `main`; `root/<org>/<name>@<ref>/` holds another branch or
tag. A revision's commit sha is derived from its content (sha1 of path + git blob id of every file), so it changes
when a test edits a file and the 40-hex sha is accepted wherever a revision is.

It speaks what `huggingface_hub` 2.4 sends (read from its source: file_download.py, hf_api.py, hf_file_system.py,
utils/_http.py): repo info (`?blobs=True` adds sizes), tree listings, paths-info, HEAD/GET `/resolve/` with
`X-Repo-Commit`, `ETag`, `X-Linked-Etag`, `X-Linked-Size`, single HTTP ranges (206 / 416), and the error headers
(`X-Error-Code: RepoNotFound | RevisionNotFound | EntryNotFound | GatedRepo`) that `hf_raise_for_status` maps to
typed errors. No Xet headers, so the client uses plain HTTP.

    with HubServer(tmp_path / "hub") as hub:
        hub.add_repo("org/model", {"config.json": b"{}", "model.safetensors": data})
        hub.gate("org/model", tokens={"hf_ok"})            # files need `Authorization: Bearer hf_ok`
        hub.drop("org/model", "model.safetensors", after=1000)  # cut the next GET after 1000 body bytes
        proc = run_python(hub, "from huggingface_hub import hf_hub_download; ...", hf_home=tmp_path / "hf")
        assert hub.file_bytes("org/model", "model.safetensors") == ...

Counters are read only when the server is quiet: a request counts once its handler has finished, and every read
(`requests`, `hits`, `total_bytes`, `file_bytes`, `api_bytes`, `bytes_by_file`, `reset_counts`) first waits for the
requests still being handled (see `HubServer._quiet`).

Environment is read by `huggingface_hub` at import, so clients run in a subprocess (`run_python`, `run_cli`) with
`HF_ENDPOINT`, `HF_HOME` and `HF_HUB_OFFLINE` set; telemetry is off so no `/api/agent-harnesses` call is made.
"""

from __future__ import annotations

import bisect
import email.utils
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".onnx", ".ckpt")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 64 * 1024
SETTLE_TIMEOUT = 30.0  # seconds a counter read waits for the requests still being handled
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Entry:
    path: str  # path in repo, "/"-separated
    file: Path
    size: int
    oid: str  # git blob sha1
    sha256: str | None  # set for LFS files

    @property
    def lfs(self) -> bool:
        return self.sha256 is not None


@dataclass(frozen=True)
class Snapshot:
    repo_id: str
    ref: str
    sha: str
    entries: dict[str, Entry]


@dataclass
class Hit:
    """One request as the server saw it. `sent` counts body bytes actually written (less than promised on a drop)."""

    method: str
    target: str
    kind: str  # "info" | "tree" | "paths-info" | "resolve" | "other"
    repo: str | None
    file: str | None
    range: str | None
    status: int
    sent: int = 0


@dataclass
class Fault:
    repo: str
    file: str
    times: int | None  # None: every time
    after: int = 0  # drop: body bytes sent before cutting the connection
    status: int = 0  # fail: HTTP status to answer instead


@dataclass
class RepoOptions:
    gated: str | bool = False  # False, "auto" or "manual"
    private: bool = False
    tokens: set[str] = field(default_factory=set)  # tokens that may read the files
    no_ranges: bool = False  # ignore Range headers (answer 200 with the whole file)
    sizes: dict[str, int] = field(default_factory=dict)  # file -> size to report instead of the real one


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    """Serve `root` over HTTP on 127.0.0.1 (a free port). Use as a context manager, or start()/stop()."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.options: dict[str, RepoOptions] = {}
        self._faults: list[tuple[str, Fault]] = []  # ("drop" | "fail", fault)
        self._lock = threading.Lock()
        # Requests whose handler has finished, as (sequence number, hit), in the order the requests were read.
        self._done: list[tuple[int, Hit]] = []
        # Requests read but not yet finished: sequence number -> request line. Guarded by _lock; _settled is
        # notified whenever one finishes.
        self._in_flight: dict[int, str] = {}
        self._seq = 0
        self._settled = threading.Condition(self._lock)
        self._hash_cache: dict[tuple[str, int, int], tuple[str, str]] = {}
        self._conns: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> HubServer:
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="hubserver",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut open keep-alive connections: afterwards the hub is unreachable."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # ---- repos ------------------------------------------------------------------------------------------------
    def repo_dir(self, repo_id: str, ref: str = "main") -> Path:
        org, name = repo_id.split("/")
        return self.root / org / (name if ref == "main" else f"{name}@{ref}")

    def add_repo(self, repo_id: str, files: dict[str, bytes | str | Path], *, ref: str = "main") -> str:
        """Write `files` (path in repo -> bytes, text, or a file to copy) as branch `ref`; return its commit sha."""
        base = self.repo_dir(repo_id, ref)
        for rel, content in files.items():
            dest = base / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, dest)
            else:
                dest.write_bytes(content.encode() if isinstance(content, str) else content)
        base.mkdir(parents=True, exist_ok=True)
        return self.commit_sha(repo_id, ref)

    def commit_sha(self, repo_id: str, ref: str = "main") -> str:
        snap = self.snapshot(repo_id, ref)
        assert snap is not None, f"no repo {repo_id}@{ref}"
        return snap.sha

    def gate(self, repo_id: str, tokens: set[str] | tuple = (), mode: str = "manual") -> None:
        """Info and listings stay public; file contents need one of `tokens` (401 without a token, 403 with another)."""
        opts = self.options.setdefault(repo_id, RepoOptions())
        opts.gated, opts.tokens = mode, set(tokens)

    def make_private(self, repo_id: str, tokens: set[str] | tuple = ()) -> None:
        """Everything answers 401 RepoNotFound unless one of `tokens` is sent (as the Hub does for private repos)."""
        opts = self.options.setdefault(repo_id, RepoOptions())
        opts.private, opts.tokens = True, set(tokens)

    def lie_size(self, repo_id: str, path: str, size: int) -> None:
        """Report `size` for `path` in info, listings and HEAD; GET still serves the real bytes."""
        self.options.setdefault(repo_id, RepoOptions()).sizes[path] = size

    def disable_ranges(self, repo_id: str) -> None:
        self.options.setdefault(repo_id, RepoOptions()).no_ranges = True

    # ---- faults -----------------------------------------------------------------------------------------------
    def drop(self, repo_id: str, path: str, *, after: int = 0, times: int | None = 1) -> None:
        """Cut the connection after `after` body bytes of the next `times` GETs of `path` (None: every GET)."""
        with self._lock:
            self._faults.append(("drop", Fault(repo_id, path, times, after=after)))

    def fail(self, repo_id: str, path: str, *, status: int = 500, times: int | None = 1) -> None:
        """Answer `status` to the next `times` HEAD/GETs of `path` (None: every one)."""
        with self._lock:
            self._faults.append(("fail", Fault(repo_id, path, times, status=status)))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, kind: str, repo: str, path: str) -> Fault | None:
        with self._lock:
            for i, (k, f) in enumerate(self._faults):
                if k == kind and f.repo == repo and f.file == path:
                    if f.times is not None:
                        f.times -= 1
                        if f.times <= 0:
                            del self._faults[i]
                    return f
        return None

    # ---- counters ---------------------------------------------------------------------------------------------
    # A handler updates its Hit while it answers (status, then `sent` after each chunk written), so a client can read
    # the last byte of a response, or see a dropped connection, and go on (or exit) before the handler thread has
    # counted that chunk. So a Hit is published only when its handler has finished, and every read first waits until
    # no request is in flight. That is enough: a request is in flight from the moment its request line has been read
    # (before any byte of its answer is sent) until its handler has finished, and a client only sees an answer after
    # the handler has read the request. So every request whose answer a client has seen, even in part, is either in
    # flight (and waited for) or finished (and published with its final counts). A keep-alive connection waiting for
    # its next request is not in flight, so idle pooled connections never block a read.
    def _quiet(self) -> None:
        """With `_lock` held: wait until no request is in flight; raise rather than return partial counts."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while self._in_flight:
            left = deadline - time.monotonic()
            if left <= 0:
                stuck = "; ".join(self._in_flight.values())
                raise AssertionError(f"test hub: {len(self._in_flight)} request(s) still being handled after "
                                     f"{SETTLE_TIMEOUT:g} s, counts would be partial: {stuck}")
            self._settled.wait(left)

    def reset_counts(self) -> None:
        """Forget every request so far (after waiting for those still being handled)."""
        with self._settled:
            self._quiet()
            self._done.clear()

    @property
    def hits(self) -> list[Hit]:
        """Every finished request, in the order they were read (a copy: waits for those still being handled)."""
        return self.requests()

    def requests(self, kind: str | None = None, repo: str | None = None, file: str | None = None) -> list[Hit]:
        with self._settled:
            self._quiet()
            return [h for _, h in self._done if (kind is None or h.kind == kind) and (repo is None or h.repo == repo)
                    and (file is None or h.file == file)]

    def _begin(self, requestline: str) -> int:
        with self._lock:
            self._seq += 1
            self._in_flight[self._seq] = requestline
            return self._seq

    def _finish(self, seq: int, hit: Hit | None) -> None:
        with self._settled:
            if hit is not None:
                # Sequence order is request order: concurrent handlers may finish in any order, but a client that
                # sends one request after seeing the answer to another sends it after that one was read.
                bisect.insort(self._done, (seq, hit), key=lambda item: item[0])
            del self._in_flight[seq]
            self._settled.notify_all()

    @property
    def total_bytes(self) -> int:
        return sum(h.sent for h in self.requests())

    def file_bytes(self, repo: str | None = None, file: str | None = None) -> int:
        """Body bytes of file contents served (`/resolve/` GETs), optionally for one repo and/or file."""
        return sum(h.sent for h in self.requests("resolve", repo, file))

    def api_bytes(self, repo: str | None = None) -> int:
        """Body bytes of JSON served (repo info, tree listings, paths-info)."""
        return sum(h.sent for h in self.requests(repo=repo) if h.kind in ("info", "tree", "paths-info"))

    def bytes_by_file(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for h in self.requests("resolve"):
            out[(h.repo, h.file)] = out.get((h.repo, h.file), 0) + h.sent
        return out

    # ---- content ----------------------------------------------------------------------------------------------
    def _hashes(self, file: Path, lfs: bool) -> tuple[str, str]:
        st = file.stat()
        key = (str(file), st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._hash_cache.get(key)
        if hit is None:
            data = file.read_bytes()
            hit = (git_blob_oid(data), hashlib.sha256(data).hexdigest() if lfs else "")
            with self._lock:
                self._hash_cache[key] = hit
        return hit

    def snapshot(self, repo_id: str, ref: str) -> Snapshot | None:
        """The repo's content at `ref` (a branch/tag folder, or a 40-hex commit sha of one), or None."""
        org, _, name = repo_id.partition("/")
        if not org or not name or "/" in name or ".." in repo_id or "@" in repo_id:
            return None
        refs = [ref]
        if SHA_RE.match(ref):
            refs = ["main"] + sorted(p.name.split("@", 1)[1] for p in (self.root / org).glob(f"{name}@*"))
        for r in refs:
            base = self.repo_dir(repo_id, r)
            if not base.is_dir():
                continue
            entries = {}
            for file in sorted(p for p in base.rglob("*") if p.is_file()):
                rel = file.relative_to(base).as_posix()
                lfs = rel.endswith(LFS_SUFFIXES)
                oid, sha256 = self._hashes(file, lfs)
                entries[rel] = Entry(rel, file, file.stat().st_size, oid, sha256 or None)
            digest = hashlib.sha1(f"{repo_id}\n".encode())
            for e in entries.values():
                digest.update(f"{e.path}\0{e.oid}\n".encode())
            sha = digest.hexdigest()
            if not SHA_RE.match(ref) or sha == ref:
                return Snapshot(repo_id, r, sha, entries)
        return None

    def repo_exists(self, repo_id: str) -> bool:
        org, _, name = repo_id.partition("/")
        if not org or not name or "/" in name or ".." in repo_id or "@" in repo_id:
            return False
        return self.repo_dir(repo_id).is_dir() or any((self.root / org).glob(f"{name}@*"))

    def reported_size(self, repo_id: str, e: Entry) -> int:
        return self.options.get(repo_id, RepoOptions()).sizes.get(e.path, e.size)

    def tree_entry(self, repo_id: str, e: Entry) -> dict:
        size = self.reported_size(repo_id, e)
        out = {"type": "file", "oid": e.oid, "size": size, "path": e.path}
        if e.lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{e.sha256}\nsize {size}\n"
            out["oid"] = git_blob_oid(pointer.encode())
            out["lfs"] = {"oid": e.sha256, "size": size, "pointerSize": len(pointer)}
        return out


def _folders(entries: dict[str, Entry]) -> set[str]:
    out = set()
    for rel in entries:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: HubServer

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def setup(self) -> None:
        super().setup()
        with self.hub._lock:
            self.hub._conns.add(self.connection)

    def finish(self) -> None:
        with self.hub._lock:
            self.hub._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    # ---- bookkeeping: a request is in flight from its request line to the end of its handling -----------------
    def handle_one_request(self) -> None:
        self._seq: int | None = None
        self._current: Hit | None = None
        try:
            super().handle_one_request()  # idles in readline() between keep-alive requests: not in flight there
        finally:
            if self._seq is not None:
                self.hub._finish(self._seq, self._current)

    def parse_request(self) -> bool:
        # Called once the request line has been read and before anything is answered (parse errors included).
        self._seq = self.hub._begin(str(self.raw_requestline, "iso-8859-1").rstrip("\r\n"))
        return super().parse_request()

    # ---- plumbing ---------------------------------------------------------------------------------------------
    def _hit(self, kind: str, repo: str | None = None, file: str | None = None) -> Hit:
        """The Hit of this request: updated while it is answered, published to `hub` when its handling has ended."""
        hit = Hit(self.command, self.path, kind, repo, file, self.headers.get("Range"), 0)
        self._current = hit
        return hit

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _send(self, hit: Hit, status: int, body: bytes = b"", headers: dict | None = None,
              content_type: str = "application/json") -> None:
        hit.status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
            hit.sent += len(body)

    def _json(self, hit: Hit, value, status: int = 200, headers: dict | None = None) -> None:
        self._send(hit, status, json.dumps(value).encode(), headers)

    def _error(self, hit: Hit, status: int, code: str | None, message: str, headers: dict | None = None) -> None:
        h = dict(headers or {})
        if code:
            h["X-Error-Code"] = code
        h["X-Error-Message"] = message
        self._json(hit, {"error": message}, status, h)

    def _read_body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _access(self, hit: Hit, repo_id: str, *, contents: bool) -> bool:
        """Apply private/gated rules; answer and return False when access is denied."""
        opts = self.hub.options.get(repo_id, RepoOptions())
        token = self._token()
        if opts.private and token not in opts.tokens:
            self._error(hit, 401, "RepoNotFound", "Repository not found")
            return False
        if contents and opts.gated and token not in opts.tokens:
            msg = (f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to "
                   "access it. Please log in.") if token is None else (
                   f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                   f"Visit https://huggingface.co/{repo_id} to ask for access.")
            self._error(hit, 401 if token is None else 403, "GatedRepo", msg)
            return False
        return True

    def _snapshot(self, hit: Hit, repo_id: str, rev: str, *, contents: bool) -> Snapshot | None:
        """The repo at `rev` if the caller may see it (listing, or `contents`); otherwise the error is sent, None."""
        if not self._access(hit, repo_id, contents=contents):
            return None
        snap = self.hub.snapshot(repo_id, rev)
        if snap is None:
            if self.hub.repo_exists(repo_id):
                self._error(hit, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            else:
                self._error(hit, 404, "RepoNotFound", "Repository not found")
        return snap

    # ---- routes -----------------------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def _route(self) -> None:
        try:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            parts = url.path.strip("/").split("/")
            if len(parts) >= 4 and parts[:2] == ["api", "models"]:
                repo_id = f"{unquote(parts[2])}/{unquote(parts[3])}"
                rest = parts[4:]
                if not rest or (len(rest) == 2 and rest[0] == "revision"):
                    return self._info(repo_id, unquote(rest[1]) if rest else "main", query)
                if rest[0] == "tree" and len(rest) >= 2:
                    return self._tree(repo_id, unquote(rest[1]), unquote("/".join(rest[2:])), query)
                if rest[0] == "paths-info" and len(rest) == 2 and self.command == "POST":
                    return self._paths_info(repo_id, unquote(rest[1]))
            if len(parts) >= 5 and parts[2] == "resolve" and self.command in ("GET", "HEAD"):
                repo_id = f"{unquote(parts[0])}/{unquote(parts[1])}"
                return self._resolve(repo_id, unquote(parts[3]), unquote("/".join(parts[4:])))
            hit = self._hit("other")
            self._error(hit, 404, None, "Not found")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _info(self, repo_id: str, rev: str, query: dict) -> None:
        hit = self._hit("info", repo_id)
        if self.command != "GET":
            return self._error(hit, 405, None, "Method not allowed")
        snap = self._snapshot(hit, repo_id, rev, contents=False)
        if snap is None:
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for e in snap.entries.values():
            s = {"rfilename": e.path}
            if blobs:
                t = self.hub.tree_entry(repo_id, e)
                s.update(size=t["size"], blobId=t["oid"])
                if e.lfs:
                    s["lfs"] = {"sha256": e.sha256, "size": t["size"], "pointerSize": t["lfs"]["pointerSize"]}
            siblings.append(s)
        opts = self.hub.options.get(repo_id, RepoOptions())
        org = repo_id.split("/")[0]
        self._json(hit, {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id, "author": org,
            "sha": snap.sha, "lastModified": "2024-01-01T00:00:00.000Z", "createdAt": "2024-01-01T00:00:00.000Z",
            "private": opts.private, "gated": opts.gated, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "library_name": "transformers", "siblings": siblings,
        })

    def _tree(self, repo_id: str, rev: str, path: str, query: dict) -> None:
        hit = self._hit("tree", repo_id, path or None)
        if self.command != "GET":
            return self._error(hit, 405, None, "Method not allowed")
        snap = self._snapshot(hit, repo_id, rev, contents=False)
        if snap is None:
            return
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        path = path.strip("/")
        folders = _folders(snap.entries)
        if path and path not in folders:
            return self._error(hit, 404, "EntryNotFound", f"{path} does not exist on {rev}",
                               {"X-Repo-Commit": snap.sha})
        prefix = f"{path}/" if path else ""
        items = []
        for f in sorted(folders):
            if f.startswith(prefix) and (recursive or "/" not in f[len(prefix):]):
                items.append({"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0,
                              "path": f})
        for e in snap.entries.values():
            if e.path.startswith(prefix) and (recursive or "/" not in e.path[len(prefix):]):
                items.append(self.hub.tree_entry(repo_id, e))
        self._json(hit, items)

    def _paths_info(self, repo_id: str, rev: str) -> None:
        hit = self._hit("paths-info", repo_id)
        form = parse_qs(self._read_body().decode())
        snap = self._snapshot(hit, repo_id, rev, contents=False)
        if snap is None:
            return
        folders = _folders(snap.entries)
        out = []
        for p in form.get("paths", []):
            p = p.strip("/")
            if p in snap.entries:
                out.append(self.hub.tree_entry(repo_id, snap.entries[p]))
            elif p in folders:
                out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "path": p})
        self._json(hit, out)

    def _resolve(self, repo_id: str, rev: str, path: str) -> None:
        hit = self._hit("resolve", repo_id, path)
        snap = self._snapshot(hit, repo_id, rev, contents=True)
        if snap is None:
            return
        e = snap.entries.get(path)
        if e is None:
            return self._error(hit, 404, "EntryNotFound", f"{path} does not exist on {rev}",
                               {"X-Repo-Commit": snap.sha})
        fault = self.hub._take_fault("fail", repo_id, path)
        if fault is not None:
            return self._error(hit, fault.status, None, f"injected failure {fault.status}")
        opts = self.hub.options.get(repo_id, RepoOptions())
        size = e.size
        etag = e.sha256 if e.lfs else e.oid
        headers = {"X-Repo-Commit": snap.sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes",
                   "Last-Modified": email.utils.formatdate(usegmt=True)}
        if e.lfs:
            headers["X-Linked-Etag"] = f'"{e.sha256}"'
            headers["X-Linked-Size"] = str(self.hub.reported_size(repo_id, e))
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and not opts.no_ranges:
            parsed = _parse_range(rng, size)
            if parsed is None:
                return self._error(hit, 416, None, "Requested Range Not Satisfiable",
                                   {**headers, "Content-Range": f"bytes */{size}"})
            (start, end), status = parsed, 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = end - start + 1
        if self.command == "HEAD" and status == 200:
            length = self.hub.reported_size(repo_id, e)  # a lie shows here, as on the Hub's metadata
        hit.status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD" or length == 0:
            return
        drop = self.hub._take_fault("drop", repo_id, path)
        limit = length if drop is None else min(length, drop.after)
        with open(e.file, "rb") as f:
            f.seek(start)
            remaining = limit
            while remaining > 0:
                chunk = f.read(min(CHUNK, remaining))
                if not chunk:
                    break
                self.wfile.write(chunk)
                hit.sent += len(chunk)
                remaining -= len(chunk)
        if drop is not None:
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """A single `bytes=a-b`, `bytes=a-` or `bytes=-n` range, clipped to the file; None when unsatisfiable."""
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", value)
    if m is None or (not m.group(1) and not m.group(2)):
        return None
    if not m.group(1):
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n > 0 and size > 0 else None
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) else size - 1
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)


# ---- clients in a subprocess (huggingface_hub reads its environment at import) -----------------------------------
_CLEARED = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HF_HOME", "HF_TOKEN_PATH", "HF_XET_CACHE",
            "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def hub_env(hub: HubServer, hf_home: str | os.PathLike, *, offline: bool = False, token: str | None = None,
            extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a client of `hub`: HF_ENDPOINT, HF_HOME, optional HF_HUB_OFFLINE / HF_TOKEN, no proxies,
    telemetry off, progress bars off, and eagle-convert's own hub retries without waits."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(hf_home), HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1,localhost",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_XET="1", EAGLE_CONVERT_HUB_RETRY_WAIT="0",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    if token is not None:
        env["HF_TOKEN"] = token
    env.update(extra or {})
    return env


def use_in_process(monkeypatch, hub: HubServer, hf_home: str | os.PathLike, *, offline: bool = False,
                   token: str | None = None) -> None:
    """Point the already-imported huggingface_hub of *this* process at `hub` (pytest's `monkeypatch` undoes it).

    Faster than a subprocess (no fresh torch import). It patches the import-time constants that the calls eagle-convert
    makes read back at call time (endpoint + URL template, HF_HOME, hub cache, offline flag, token file, telemetry);
    code paths that copied a constant at import (e.g. HF_HUB_DISABLE_PROGRESS_BARS) keep the old value. To test the
    environment itself (HF_HOME, HF_HUB_OFFLINE=1 read at import), use `run_python` / `run_cli`."""
    from huggingface_hub import constants

    home = Path(hf_home)
    for name, value in {
        "ENDPOINT": hub.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": hub.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"), "HF_HUB_OFFLINE": offline,
        "HF_HUB_DISABLE_TELEMETRY": True,
    }.items():
        monkeypatch.setattr(constants, name, value)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    if token is not None:
        monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("EAGLE_CONVERT_HUB_RETRY_WAIT", "0")


# Prepended to snippets: makes huggingface_hub's own fixed retry sleeps (1 s per resume in http_get, 1..8 s backoff)
# instant, so fault tests stay fast. Only for snippets that ask for it (no_sleep=True).
_NO_SLEEP = "import time as _t; _t.sleep = lambda s: None\n"


def run_python(hub: HubServer, code: str, *, hf_home: str | os.PathLike, offline: bool = False,
               token: str | None = None, env: dict[str, str] | None = None, no_sleep: bool = False,
               timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `code` with `sys.executable` as a client of `hub`. stdout/stderr are captured as text."""
    return subprocess.run([sys.executable, "-c", (_NO_SLEEP if no_sleep else "") + code], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO_ROOT,
                          env=hub_env(hub, hf_home, offline=offline, token=token, extra=env))


def run_json(hub: HubServer, code: str, **kwargs):
    """Run `code` (which must print one JSON value as its last stdout line) and return that value; fail loudly."""
    proc = run_python(hub, code, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(f"snippet failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cli(hub: HubServer, args: list[str], *, hf_home: str | os.PathLike, offline: bool = False,
            token: str | None = None, env: dict[str, str] | None = None, no_sleep: bool = False,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the `eagle-convert` CLI (`python -m eagle_convert`, else `eagle_convert.cli.main`) as a client of `hub`."""
    code = ("import importlib.util, runpy, sys\n"
            "sys.argv[0] = 'eagle-convert'\n"
            "if importlib.util.find_spec('eagle_convert.__main__'):\n"
            "    runpy.run_module('eagle_convert', run_name='__main__', alter_sys=True)\n"
            "else:\n"
            "    from eagle_convert.cli import main\n"
            "    sys.exit(main())\n")
    return subprocess.run([sys.executable, "-c", (_NO_SLEEP if no_sleep else "") + code, *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
                          env=hub_env(hub, hf_home, offline=offline, token=token, extra=env))
