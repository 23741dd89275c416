"""What the tests that signal a running command share: how long they wait for it, and how its children start with
the default signal handlers whatever pytest was started with."""

from __future__ import annotations

import contextlib
import signal

from eagle_convert.io import interrupts

WAIT_S = 120  # generous: a loaded CI machine imports torch slowly; nothing here waits this long when it works


@contextlib.contextmanager
def children_get_default_signals():
    """A runner that started pytest in the background (SIGINT ignored) or under nohup (SIGHUP ignored) passes that on
    to every child, and the command rightly keeps a signal it was told to ignore. A signal with a Python handler is
    reset to its default in a child by exec, so one is set here while the child starts (safer than preexec_fn)."""
    ignored = [sig for sig in interrupts.HANDLED if signal.getsignal(sig) is signal.SIG_IGN]
    for sig in ignored:
        signal.signal(sig, signal.default_int_handler)
    try:
        yield
    finally:
        for sig in ignored:
            signal.signal(sig, signal.SIG_IGN)
