"""Every thread the I/O layer starts (read-ahead, pre-hashing, hashing), so that all of them are finished before a
conversion returns, however it ends, and none is running when the interpreter shuts down.

Why this matters: a daemon thread still inside native code when Python finalizes is killed when it next asks for the
GIL, and when torch or libstdc++ frames are on its stack that kill aborts the whole process (SIGABRT, "terminate
called without an active exception") after a complete, verified write. So work here is done in bounded steps (a
read-ahead chunk, a 16 MiB hash chunk) that check `CANCEL` in between, and `finish()` cancels and joins. It runs at
the end of every conversion and from `atexit` (before finalization), for callers that never reach either."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

from .interrupts import shielded

CANCEL = threading.Event()  # set by finish(): every background loop stops at its next step
_threads: set[threading.Thread] = set()
_lock = threading.Lock()
# How each piece of per-conversion reading state (the read-ahead, the pre-hash) is forgotten: registered by the module
# that holds it (readahead.py, digest.py), which imports this one, so that this module names none of them.
_forgetters: list[Callable[[], None]] = []


class Cancelled(Exception):
    """Background work stopped by finish() before it was done (only seen by code that waits for it afterwards)."""


def start(target: Callable, *args, name: str) -> threading.Thread:
    """Start `target(*args)` on a tracked thread. Daemon, so that one left running can never hold the interpreter
    open by itself; finish() (also run at exit) is what waits for it."""
    # One CANCEL for the process: conversions in one process run one after the other (their read-ahead and pre-hash
    # state is process-wide too), so finishing one never stops another's work.

    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    # Started under the lock, so finish() never sees a thread it could not join (one not yet started), and a thread
    # that did start is never forgotten. A thread leaves the set only once it has ended (is_alive() is false), never
    # from inside itself: a thread that removed itself would still be running its last steps when finish() returned
    # (the suite under load caught exactly that: a hash thread alive just after convert returned).
    with _lock:
        _threads.difference_update([t for t in _threads if not t.is_alive()])  # ended: nothing left to wait for
        try:
            thread.start()
        finally:
            if thread.ident is not None:
                _threads.add(thread)
    return thread


def running() -> list[threading.Thread]:
    with _lock:
        return [t for t in _threads if t.is_alive()]


def finish() -> None:
    """Cancel every background step not yet done and wait until every tracked thread has ended. Idempotent; after it,
    new work may start again (the next conversion)."""
    CANCEL.set()
    while True:
        with _lock:
            pending = [t for t in _threads if t is not threading.current_thread()]
        if not pending:
            break
        for thread in pending:
            with shielded():  # a signal raised inside join's lock bookkeeping could hang it; each step is short
                thread.join()
            with _lock:
                _threads.discard(thread)
    CANCEL.clear()  # only once nothing runs: an interrupted join leaves the rest cancelled


def forget_at_end(forget: Callable[[], None]) -> None:
    """Register how a piece of reading state is forgotten when a conversion ends (`end_reads`)."""
    _forgetters.append(forget)


def end_reads() -> None:
    """End what a conversion (`convert`, `convert --mtp`) and the CLI's early reads started: forget the read-ahead
    and pre-hash state (a long-lived process must not trust a range read long ago), then cancel and join every
    background thread."""
    for forget in _forgetters:
        forget()
    finish()


atexit.register(finish)
