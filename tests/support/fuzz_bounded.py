"""Every fuzz run in a process of its own, bounded in time and address space, so a hang or a memory blow-up is a
failure the fuzzer reports, never a stuck suite (issue 33).

The parent has already imported torch and eagle_convert; each run is an `os.fork()` of it (milliseconds, no
interpreter start), which sets RLIMIT_AS to the parent's address space now plus `memory` bytes (torch reserves a few
hundred MB of virtual memory at import: measured from the running process, never guessed), runs the CLI through
click's CliRunner and writes what came back to a file. The parent waits up to `seconds`, then SIGKILLs the child and
records "hung". A MemoryError escaping the CLI, or a child killed by a signal it did not get from us (an allocator
that aborts when the limit denies it memory), is recorded as "memory".

The parent never runs the CLI itself: a command that leaves threads behind would make the next fork unsafe."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SECONDS = 120.0  # generous: a tiny run takes ~1 s; the bound is for hangs, not for speed
DEFAULT_MEMORY = 3 << 30  # address space a run may add to the parent's (the largest honest run needs < 1 GB)


@dataclass(frozen=True)
class Outcome:
    """What one bounded CLI run did."""
    status: str  # "exited" | "hung" | "memory" | "died"
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    exception: str | None = None  # an exception the CLI let escape (not SystemExit): "TypeError: ... at file:line"
    seconds: float = 0.0

    def problem(self) -> str | None:
        """Why this run is a failure whatever its input (a hang, memory, a crash), or None."""
        if self.status == "hung":
            return f"hung: still running after {self.seconds:.0f} s (killed)"
        if self.status in ("memory", "died"):
            return f"{self.status}: {self.exception or 'no result'}"
        if self.exception:
            return f"exit {self.exit_code} with an escaped exception ({self.exception})"
        if "Traceback (most recent call last)" in self.stderr or "Exception in thread" in self.stderr:
            return f"a traceback on stderr: {self.stderr[-300:]!r}"
        return None


def address_space() -> int:
    """This process's virtual memory size now (bytes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _warnings_as_a_user_sees_them() -> None:
    """Python's default warning filters, shown on (CliRunner's) stderr: the fork inherits pytest's capture of
    warnings into a list, which would hide from the oracle a warning the CLI prints to a user."""
    warnings.resetwarnings()  # also invalidates the "already shown here" registries the parent filled
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)

    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
    warnings.showwarning = show


def _child(cli, argv: list[str], result_file: Path, limit: int) -> None:
    from click.testing import CliRunner

    _warnings_as_a_user_sees_them()
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    result = CliRunner().invoke(cli, argv)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.getrlimit(resource.RLIMIT_AS)[1]))
    escaped = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        where = traceback.extract_tb(result.exc_info[2])[-1] if result.exc_info and result.exc_info[2] else None
        where = f"{where.filename}:{where.lineno}" if where else "?"
        escaped = f"{type(result.exception).__name__}: {str(result.exception)[:300]} at {where}"
    memory = isinstance(result.exception, MemoryError)
    result_file.write_text(json.dumps({"exit_code": result.exit_code, "stdout": result.stdout,
                                       "stderr": result.stderr, "exception": escaped, "memory": memory}))


def run_cli(argv: list[str], *, seconds: float = DEFAULT_SECONDS, memory: int = DEFAULT_MEMORY) -> Outcome:
    """`eagle-convert ARGV` in a forked child, bounded by `seconds` of wall clock and `memory` more bytes of address
    space than this process has now."""
    from eagle_convert.cli.main import main as cli

    limit = address_space() + memory
    fd, name = tempfile.mkstemp(prefix="fuzz-outcome-", suffix=".json")
    os.close(fd)
    result_file = Path(name)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never return into the parent's code (pytest's, the fuzzer's loop)
        code = 0
        try:
            _child(cli, argv, result_file, limit)
        except BaseException:  # noqa: BLE001 - anything at all: the parent reads "no result"
            code = 70
        finally:
            os._exit(code)
    try:
        return _wait(pid, result_file, started, seconds)
    finally:
        result_file.unlink(missing_ok=True)


def _wait(pid: int, result_file: Path, started: float, seconds: float) -> Outcome:
    pause = 0.005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        elapsed = time.monotonic() - started
        if done:
            break
        if elapsed > seconds:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return Outcome("hung", None, seconds=elapsed)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    text = result_file.read_text() if result_file.stat().st_size else ""
    if not text:
        how = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)} before writing a result")
        return Outcome("memory" if os.WIFSIGNALED(status) else "died", None, exception=how, seconds=elapsed)
    data = json.loads(text)
    status_word = "memory" if data["memory"] else "exited"
    return Outcome(status_word, data["exit_code"], data["stdout"], data["stderr"], data["exception"], elapsed)
