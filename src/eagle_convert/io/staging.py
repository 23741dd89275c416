"""Atomic output: the output folder is built in a staging folder beside OUT and renamed into place only when
complete and verified, so a failure or Ctrl-C leaves neither a half-written OUT nor the staging folder; a conversion
racing for the same OUT is told so, and the staging folders of a killed run are recognised and removed."""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

from ..errors import OutputPathError, option
from . import interrupts
from .interrupts import pause_for_test

STAGING_OWNER = ".eagle-convert-owner"  # in a staging folder while it is written: {"pid", "host"} of its writer


@contextlib.contextmanager
def staged_output(out: Path, force: bool) -> Iterator[Path]:
    """Yield a staging folder beside `out`; on success move it into place (replacing `out` when `force`), on any
    error or interrupt remove it. An existing `out` is moved aside first and only deleted after the swap. The folder
    holds an owner marker until the move, so that a run killed outright (SIGKILL) leaves one the next run recognises
    (remove_stale_staging); the caller lists the folder without it (STAGING_OWNER)."""
    out = out.resolve()
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]  # parents we make, deepest first
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    staging = out.parent / f".{out.name}.eagle-convert-{tag}.tmp"
    staging.mkdir()
    try:
        (staging / STAGING_OWNER).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
        yield staging
        pause_for_test("rename")
        interrupts.check()  # never a finished output after a signal, even one whose exception was lost
        (staging / STAGING_OWNER).unlink()
        _move_into_place(staging, out, force, out.parent / f".{out.name}.eagle-convert-{tag}.old")
        interrupts.output_complete(out)
        pause_for_test("renamed")  # tests: a signal after the output is whole must say so
    except BaseException:
        with interrupts.shielded():  # a second Ctrl-C or SIGTERM must not cut the cleanup short
            shutil.rmtree(staging, ignore_errors=True)
            for folder in created:  # leave no empty parent folders behind either
                with contextlib.suppress(OSError):
                    folder.rmdir()
        raise


def _move_into_place(staging: Path, out: Path, force: bool, old: Path) -> None:
    """Rename `staging` to `out` (with `force`, moving an existing `out` aside to `old` first, deleted after). `out`
    did not exist when the conversion started unless `force`: if the rename finds it there, or the folders are gone
    from under it, another conversion wrote the same output meanwhile, and the user is told so."""
    try:
        if out.exists() or out.is_symlink():
            if not force:  # checked up front too: it appeared while we were writing
                raise _raced(out, "appeared while this conversion was writing it")
            out.rename(old)
            try:
                staging.rename(out)
            except OSError:
                _put_back(old, out)
                raise
            _remove(old)
        else:
            staging.rename(out)
    except OutputPathError:
        raise
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise _raced(out, "appeared just before this conversion moved its own output into place") from exc
        if exc.errno == errno.ENOENT:  # our staging folder, or the `out` being replaced, moved from under us
            raise _raced(out, "or this conversion's staging folder was moved or removed while it was written") from exc
        raise


def _put_back(old: Path, out: Path) -> None:
    """The swap failed after `out` was moved aside: put it back, or, when another conversion's output took its place
    (the race), delete it as --force asked rather than leave a hidden copy nobody removes."""
    try:
        old.rename(out)
    except OSError:
        if not out.exists():
            raise  # nothing took its place: keep the only copy (the caller's error says why the swap failed)
        _remove(old)


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _raced(out: Path, what: str) -> OutputPathError:
    return OutputPathError(f"{out} {what}: another conversion wrote the same output at the same time (or another "
                           "program did). This conversion's output was discarded; the other one's is left as it is.",
                           f"Run one conversion per output folder at a time, or pass {option('force')} to replace "
                           "the output.")


def remove_stale_staging(out: Path) -> list[str]:
    """Remove the staging folders beside `out` left by a conversion that was killed (SIGKILL, power loss), and say
    which. Only folders that are unambiguously ours and stale: our name pattern, our owner marker, written on this
    machine by a process that is no longer running. A live run's folder, or one without a marker, is left alone."""
    out = Path(os.path.realpath(out))
    said = []
    for folder in sorted(out.parent.glob(f".{glob.escape(out.name)}.eagle-convert-*.tmp")):
        owner = _owner(folder)
        if owner is None or owner["host"] != socket.gethostname() or _running(owner["pid"]):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        said.append(f"removed {folder}, a staging folder left by a conversion that was killed (pid {owner['pid']})")
    return said


def _owner(folder: Path) -> dict | None:
    if folder.is_symlink() or not folder.is_dir():
        return None
    try:
        owner = json.loads((folder / STAGING_OWNER).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(owner, dict) and isinstance(owner.get("pid"), int) and isinstance(owner.get("host"), str)
    return owner if ok else None


def _running(pid: int) -> bool:
    """Whether process `pid` exists here (a reused pid counts as running: then the folder is kept, never lost)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True
