"""Sizes as users write them (5GB, 500MB, 2GiB), without importing torch: the CLI parses options before it loads."""

from __future__ import annotations

UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "B": 1}


def parse_size(text: str | int) -> int:
    if isinstance(text, int):
        return text
    t = text.strip().upper()
    for unit, mult in UNITS.items():
        if t.endswith(unit) and t[: -len(unit)].strip().replace(".", "", 1).isdigit():
            return int(float(t[: -len(unit)]) * mult)
    if t.isdigit():
        return int(t)
    raise ValueError(f"not a size: {text!r} (use e.g. 5GB, 500MB or a number of bytes)")
