"""Progress on stderr for work that can take more than a few seconds, whatever stdout carries (`--json` included:
stdout holds only the result, so progress never needs turning off for it; `--quiet` does).

On a terminal: a tqdm bar redrawn in place. On a pipe or a file (CI logs, `2> log`): plain lines, none in the first
EVERY_S seconds, then one every EVERY_S seconds and one at the end. A carriage-return bar in a log is either one
ever-growing line or hundreds of redraws, depending on the viewer; a dated-by-position line every few seconds says the
job is alive and how far it got, and a command that is done within seconds adds nothing to its log.
EAGLE_CONVERT_PROGRESS_EVERY=SECONDS sets the interval (0: a line per step; the tests use it)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

EVERY_ENV = "EAGLE_CONVERT_PROGRESS_EVERY"
EVERY_S = 10.0

T = TypeVar("T")


def every_s() -> float:
    try:
        return max(0.0, float(os.environ.get(EVERY_ENV, EVERY_S)))
    except ValueError:  # a typo in a tuning variable is not worth failing a conversion for
        return EVERY_S


class Progress:
    """`update()` per step, `note(**fields)` for figures shown beside the count, `close()` at the end."""

    def __init__(self, what: str, total: int | None, unit: str, *, enabled: bool = True, stream: TextIO | None = None):
        self.what, self.total, self.unit, self.enabled = what, total, unit, enabled
        self.stream = stream or sys.stderr
        self.done, self.fields, self.lines = 0, {}, 0
        self.start = self.last = time.monotonic()
        self.bar = _tqdm(what, total, unit, self.stream) if enabled and _is_terminal(self.stream) else None

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and self.done != self.total and time.monotonic() - self.last >= every_s():
            self._line()  # the last step is close()'s "done" line

    def note(self, **fields) -> None:
        self.fields.update(fields)
        if self.bar is not None:
            self.bar.set_postfix(fields, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.lines:  # said something: say it is over
            self._line(final=True)
        self.enabled = False

    def _line(self, final: bool = False) -> None:
        now = time.monotonic()
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        extra = "".join(f", {key} {value}" for key, value in self.fields.items())
        state = "done" if final else "at"
        print(f"{self.what}: {state} {count} {self.unit}s{extra} ({now - self.start:.0f} s)", file=self.stream,
              flush=True)
        self.lines += 1
        self.last = now

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tracked(items: Iterable[T], what: str, unit: str, *, enabled: bool = True) -> Iterator[T]:
    """`items`, reporting each one as done once the loop body has run for it."""
    items = list(items) if not hasattr(items, "__len__") else items
    with Progress(what, len(items), unit, enabled=enabled) as shown:
        for item in items:
            yield item
            shown.update()


def announce(step: str, *, enabled: bool = True) -> None:
    """One line before a single step that takes long and has no count to show (an engine starting: tens of s)."""
    if enabled:
        print(f"{step} ...", file=sys.stderr, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _tqdm(what: str, total: int | None, unit: str, stream: TextIO):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but a bar is not worth failing for
        return None
    return tqdm(total=total, desc=what, unit=unit, file=stream, leave=False)
