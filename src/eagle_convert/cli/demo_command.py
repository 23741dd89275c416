"""`eagle-convert demo`'s entry: the demo itself (testing/demo.py) builds a tiny pair and walks the user path."""

from __future__ import annotations

from collections.abc import Callable

from .. import api


def run_demo(workdir: str | None = None, echo: Callable[[str], None] | None = print, k: int = 3) -> dict:
    return api.demo(workdir, echo=echo, k=k)
