"""Signals: SIGINT (Ctrl-C), SIGTERM (what `timeout` and CI cancellation send) and SIGHUP (a closed terminal) stop a
conversion the same way: the staging folder is removed, one line is said, and the exit code is 128 + the signal.

Why a flag as well as an exception: Python raises a signal handler's exception at whatever bytecode the main thread
runs next, and where that is a `__del__`, a weakref callback or a C extension's callback the exception is printed as
"Exception ignored" and lost, and the conversion would run on to a complete output and exit 0. So the handler also
records the signal, and the writers (each chunk) and the final rename check that record: a lost exception is raised
again within one chunk, and no output is ever moved into place after a signal.

Handlers are installed only by the CLI, in the main thread (`handled_signals`), and the previous ones restored after;
a library caller keeps its own. A signal ignored when the command started (nohup, a background job) stays ignored."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_received: list[int] = []  # signals received while handled_signals() was active, first first
_shielded = [0]  # > 0 while cleanup runs: a second signal must not cut short the removal of the staging folder


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
    """Raise Interrupted if a handled signal arrived (its first exception may have been lost). Any thread."""
    if _received:
        raise Interrupted(_received[0])


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """While cleaning up after an error or a signal: further signals are recorded, not raised."""
    _shielded[0] += 1
    try:
        yield
    finally:
        _shielded[0] -= 1


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
    try:
        for signum in previous:
            signal.signal(signum, _handler)
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)
        _received.clear()


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
