"""Signals: SIGINT (Ctrl-C), SIGTERM (what `timeout` and CI cancellation send) and SIGHUP (a closed terminal) stop a
conversion the same way: the staging folder is removed, one line is said, and the exit code is 128 + the signal.

Why not just Python's KeyboardInterrupt: Python runs a signal handler only when the main thread next runs bytecode,
and a conversion's main thread mostly waits on a lock (a writer's future, a hash) while other threads work. The
kernel may deliver the signal to one of those threads, which does not wake the main thread, and Python 3.11's
threads can even clear the "signal pending" flag they cannot act on; and where the handler does run inside a
`__del__` or a callback, its exception is printed and lost. Each let a Ctrl-C be ignored and the conversion finish
with exit 0 (2 of 25 tries on a loaded machine). So: the C-level handler also writes the signal number to a pipe
(signal.set_wakeup_fd), which `check()` reads from any thread; the writers check it every chunk, the main thread
waits in short steps that check it (`wait_for`), and the final rename checks it. No output is moved into place after
a signal, and the writers stop within a chunk.

Handlers are installed only by the CLI, in the main thread (`handled_signals`), and the previous ones (and wakeup
fd) restored after; a library caller keeps its own. A signal ignored when the command started (nohup, a background
job) stays ignored.

Native calls that hold the GIL (a tokenizer encoding a long line: seconds, in one call) keep even the main thread
from running its handler, so a Ctrl-C there waited for the call to return (40 s and more while `vocab-map build`
counted). Work that writes nothing and leaves nothing behind runs inside `immediate()`: a signal there ends the
process at once by its default action, as SIGTERM did before the CLI handled it.

A signal that lands after an output was moved into place must not be reported as "nothing was written": staging.py
records each output it completes (`output_complete`), and `interrupted_line` says which are whole."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from pathlib import Path

HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
POLL_S = 0.1  # how long the main thread waits at a time before it looks for a signal again
_received: list[int] = []  # signals received while handled_signals() was active, first first
_wakeup: list[int] = []  # the read end of the wakeup pipe, while handled_signals() is active
_lock = threading.Lock()
_shielded = [0]  # > 0 while the main thread is in shielded(): a signal is recorded, and raised by check() after
_completed: list[Path] = []  # outputs moved into place since forget_outputs(): whole, whatever comes after


class Interrupted(KeyboardInterrupt):
    """A handled signal: a KeyboardInterrupt, so every cleanup that runs on Ctrl-C runs on SIGTERM and SIGHUP too."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP: what a shell reports

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


def _handler(signum: int, frame) -> None:
    _received.append(signum)
    if not _shielded[0]:
        raise Interrupted(signum)


def check() -> None:
    """Raise Interrupted if a handled signal arrived (its first exception may have been lost, or Python may not have
    run its handler yet). Any thread."""
    with _lock:
        for fd in _wakeup:
            with contextlib.suppress(OSError):  # BlockingIOError: nothing arrived
                _received.extend(n for n in os.read(fd, 64) if n in HANDLED)
    if _received:
        raise Interrupted(_received[0])


def wait_for(future: Future):
    """future.result(), waiting in steps of POLL_S that look for a signal in between (see the module docstring).
    The wait itself is shielded: an exception raised inside it, between a lock's acquire and release, would leave the
    future's lock held and the writer that completes it blocked forever (seen: a SIGHUP hung a conversion)."""
    while True:
        with shielded():
            done = futures_wait([future], timeout=POLL_S).done
        if done:
            return future.result()
        check()


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Signals are recorded, not raised, while the main thread is here: cleaning up after an error or a signal, or
    waiting inside a lock's bookkeeping (the handler runs only in the main thread; elsewhere this is a no-op)."""
    main = threading.current_thread() is threading.main_thread()
    _shielded[0] += main
    try:
        yield
    finally:
        _shielded[0] -= main


@contextlib.contextmanager
def handled_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into Interrupted for the duration (main thread only: elsewhere, a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in HANDLED:
        before = signal.getsignal(signum)
        if before is signal.SIG_IGN:  # nohup or a background job: ignoring it was asked for
            continue
        previous[signum] = before
    _received.clear()
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    wakeup_before = None
    try:
        for signum in previous:
            signal.signal(signum, _handler)
        wakeup_before = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        _wakeup.append(read_end)
        yield
    finally:
        with _lock:
            _wakeup.clear()
        if wakeup_before is not None:
            signal.set_wakeup_fd(wakeup_before)
        for signum, before in previous.items():
            signal.signal(signum, before)
        os.close(read_end)
        os.close(write_end)
        _received.clear()


@contextlib.contextmanager
def immediate() -> Iterator[None]:
    """While inside, a signal handled_signals() handles ends the process at once (the signal's default action: no
    message, the exit status a shell reports as 128 + the signal), instead of waiting for the main thread's next
    bytecode. Only for work that has written nothing and has nothing to clean up (reading and tokenizing input).
    A no-op where handled_signals() is not active: a library caller keeps its own handlers."""
    if not _wakeup or threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = [signum for signum in HANDLED if signal.getsignal(signum) is _handler]
    check()  # one that came before: handled as usual
    try:
        for signum in ours:
            signal.signal(signum, signal.SIG_DFL)
        yield
    finally:
        for signum in ours:
            signal.signal(signum, _handler)


def output_complete(path: Path) -> None:
    """`path` was moved into place whole (staging.py): an interrupt after this must not say nothing was written."""
    _completed.append(Path(path))


def forget_outputs() -> None:
    """A new command starts: no output of it is complete yet."""
    _completed.clear()


def interrupted_line(signal_name: str | None) -> str:
    """The one line said on an interrupt: nothing was written, or which outputs are complete and where."""
    by = f" by {signal_name}" if signal_name else ""
    if not _completed:
        return f"interrupted{by}: nothing was written."
    where = ", ".join(str(p) for p in _completed)
    return f"interrupted{by} after the output was complete: {where} is whole and in place."


TEST_PAUSE = "EAGLE_CONVERT_TEST_PAUSE"  # tests only, off by default: "<point>:<folder>" (see pause_for_test)


def pause_for_test(point: str, stop: threading.Event | None = None) -> None:
    """For tests of signals and races only: when $EAGLE_CONVERT_TEST_PAUSE is "<point>:<folder>", create
    <folder>/<point>.ready and wait (at most 120 s) until <folder>/<point>.go exists, as busy work would: a signal
    or `stop` ends the wait as they end a writer's next chunk."""
    spec = os.environ.get(TEST_PAUSE, "")
    name, _, folder = spec.partition(":")
    if name != point or not folder:
        return
    (Path(folder) / f"{point}.ready").touch()
    deadline = time.monotonic() + 120
    while not (Path(folder) / f"{point}.go").exists() and time.monotonic() < deadline:
        if stop is not None and stop.is_set():
            return
        check()
        time.sleep(0.01)
