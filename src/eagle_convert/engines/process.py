"""The engine's subprocess: started in a session of its own (so that the engine's own children are one process group),
spoken to one JSON line at a time with bounded waits, and always ended, with its children, when bench ends: normally,
on an error or on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

from ..errors import EngineError

# "...Error: ..." lines, minus the wrappers vLLM's front end adds around the loader's own error.
_ERROR_LINE = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)$")
_GENERIC = ("initialization failed", "See stack trace", "See root cause", "Engine core proc")


def root_cause(lines: list[str]) -> str | None:
    """The last specific error line any engine process logged (vLLM's front end only says that the engine core
    failed; the weight loader's ValueError is logged by the worker process)."""
    found = None
    for line in lines:
        match = _ERROR_LINE.search(line)
        if match and not any(g in line for g in _GENERIC) and not line.lstrip().startswith("raise"):
            found = f"{match.group(1)}: {match.group(2)}"
    return found[:1000] if found else None


class EngineProcess:
    """`python script REPLY_FD`, commands on its stdin, replies on a pipe of their own, logs in `log_path`."""

    def __init__(self, python: str, script: Path, log_path: Path, env: dict, what: str):
        self.what = what
        self.log_path = log_path
        read_fd, write_fd = os.pipe()
        self._log = open(log_path, "wb")
        try:
            self.proc = subprocess.Popen([python, str(script), str(write_fd)], stdin=subprocess.PIPE,
                                         stdout=self._log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env,
                                         start_new_session=True)
        except OSError as error:
            os.close(read_fd)
            raise EngineError(f"Cannot start the engine interpreter {python}: {error}.",
                              "Pass an interpreter that has vLLM with --engine-python PATH.") from error
        finally:
            os.close(write_fd)
        self._replies = os.fdopen(read_fd, "r")
        self._buffer = ""

    def request(self, command: dict, timeout_s: float) -> dict:
        try:
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: the reply read below says why
        reply = self._read_line(timeout_s)
        data = json.loads(reply) if reply else None
        if data is None or not data.get("ok"):
            if reply is not None:  # it reported or closed the pipe: let it (and its engine processes) finish logging
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            error = self._failure(None if data is None else data.get("error"), timeout_s)
            self.close(grace_s=0)
            raise error
        return data

    def _read_line(self, timeout_s: float) -> str | None:
        """The next reply line; "" when the process closed its end, None when `timeout_s` passed."""
        deadline = time.monotonic() + timeout_s
        fd = self._replies.fileno()
        while "\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 65536).decode(errors="replace")
                if not chunk:  # the process closed the pipe: it ended
                    return ""
                self._buffer += chunk
        line, self._buffer = self._buffer.split("\n", 1)
        return line

    def _failure(self, error: str | None, timeout_s: float) -> EngineError:
        lines = self.log_lines()
        cause = root_cause(lines)
        if error is None and self.proc.poll() is None:
            what = f"{self.what} did not answer within {timeout_s:.0f} s (bounded wait); it was stopped"
        elif error is None:
            what = f"{self.what} ended with exit status {self.proc.returncode}"
        else:
            what = f"{self.what} failed: {error.rstrip('.')}"
        detail = (f" The engine's root cause: {cause.rstrip('.')}."
                  if cause and (error is None or cause not in error) else "")
        if not cause and not error:
            tail = " | ".join(line for line in lines[-5:] if line.strip())
            detail = f" Its last log lines: {tail}" if tail else ""
        return EngineError(f"{what}.{detail}",
                           "A head the engine cannot load for this target shows up here (check `eagle-convert "
                           "inspect DRAFT --target TARGET` and the layout given with --to); a crash at load names its "
                           "cause above. Set EAGLE_CONVERT_ENGINE_LOG=FILE to keep the engine's whole log.")

    def log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-3000:]
        except OSError:
            return []

    def close(self, grace_s: float = 20.0) -> None:
        """End of stdin asks the worker to shut its engine down; after `grace_s` the whole group is terminated,
        then killed. Idempotent."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            if grace_s > 0:
                try:
                    self.proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
        self._end_group()
        self._replies.close()
        self._log.close()

    def _end_group(self) -> None:
        """The worker's children (vLLM's engine core and per-rank workers) live in its process group."""
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.proc.poll()
                if not _group_alive(self.proc.pid):
                    return
                time.sleep(0.1)
        self.proc.poll()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
