"""The one list of layouts. CLI choices, detection order and the README table all come from here."""

from __future__ import annotations

from ..errors import LayoutError

LAYOUTS: dict[str, "Layout"] = {}  # noqa: F821  (filled by @register, in detection order)


def register(cls):
    LAYOUTS[cls.name] = cls()
    return cls


def output_layouts() -> list[str]:
    return [name for name, layout in LAYOUTS.items() if layout.writable]


def get_layout(name: str):
    if name not in LAYOUTS:
        raise LayoutError(f"Unknown layout {name!r}.", f"Choose one of: {', '.join(LAYOUTS)}.")
    return LAYOUTS[name]


def detect_layout(config: dict, names: frozenset[str]):
    """(layout, reason) for the first layout that recognises the checkpoint, or (None, what was found)."""
    for layout in sorted(LAYOUTS.values(), key=lambda layout: layout.detect_priority):
        reason = layout.detect(config, names)
        if reason:
            return layout, reason
    return None, None
