"""The one list of layouts. CLI choices, detection order and the layouts table of docs/layouts.md all come from here.

It holds the layouts a draft checkpoint is read from or converted to (`convert DRAFT --target T --to`) and the
layouts a head inside its target is extracted to (`convert --mtp T --to`, `from_target`); `draft_layouts` is the
first group, which the tables, detection and `convert DRAFT`'s choices list."""

from __future__ import annotations

from ..errors import LayoutError
from ..kinds import DFLASH, EAGLE1, EAGLE3, KINDS

LAYOUTS: dict[str, Layout] = {}  # noqa: F821  (filled by @register, in detection order)


def register(cls):
    LAYOUTS[cls.name] = cls()
    return cls


def draft_layouts() -> dict[str, Layout]:  # noqa: F821
    """The layouts of a draft checkpoint (read, or written by `convert DRAFT`), in registration order."""
    return {name: layout for name, layout in LAYOUTS.items() if not layout.from_target}


def output_layouts() -> list[str]:
    return [name for name, layout in draft_layouts().items() if layout.writable]


def served_as_stored(engine: str) -> list[str]:
    """The layouts `engine` loads as they are stored (no conversion needed)."""
    return [name for name, layout in draft_layouts().items() if engine in layout.served_by]


def output_layouts_for(kind: str) -> list[str]:
    """The layouts that can write a `kind` head, in table order (`output_order`)."""
    writers = [layout for layout in LAYOUTS.values() if layout.writable and kind in layout.kinds]
    return [layout.name for layout in sorted(writers, key=lambda layout: layout.output_order)]


# `convert` without --to, per head kind: a layout that holds the head, so that the default never fails. EAGLE-1
# keeps the seed's vllm-v0 (what it has always written, byte for byte); vllm-v0 cannot hold an EAGLE-3 head (v0 had
# none), which gets the layout today's vLLM loads (`method: eagle3`, its V1 engine).
# DFlash: z-lab's layout, what vLLM `method: dflash` and SGLang DFLASH load.
DEFAULT_OUTPUT_LAYOUTS = {EAGLE1: "vllm-v0", EAGLE3: "vllm", DFLASH: "dflash"}


def default_output_layout(kind: str) -> str:
    """The layout `convert` writes a `kind` head in when no --to is given (DEFAULT_OUTPUT_LAYOUTS)."""
    return DEFAULT_OUTPUT_LAYOUTS[kind]


def default_layouts_said() -> str:
    """The rule in words, for --help and the docs: "EAGLE-1 -> vllm-v0, EAGLE-3 -> vllm"."""
    return ", ".join(f"{KINDS[kind].title} -> {name}" for kind, name in DEFAULT_OUTPUT_LAYOUTS.items())


def get_layout(name: str):
    """A draft layout by name (`convert DRAFT --to`, a head's own layout)."""
    layouts = draft_layouts()
    if name not in layouts:
        raise LayoutError(f"Unknown layout {name!r}.", f"Choose one of: {', '.join(layouts)}.")
    return layouts[name]


def extraction_layouts(kind: str) -> dict[str, Layout]:  # noqa: F821
    """--to value -> layout, for a `kind` head extracted from inside its target (`convert --mtp T --to`)."""
    return {LAYOUTS[name].to: LAYOUTS[name] for name in output_layouts_for(kind) if LAYOUTS[name].from_target}


def detect_layout(config: dict, names: frozenset[str]):
    """(layout, reason) for the first layout that recognises the checkpoint, or (None, what was found)."""
    for layout in sorted(draft_layouts().values(), key=lambda layout: layout.detect_priority):
        reason = layout.detect(config, names)
        if reason:
            return layout, reason
    return None, None


def markdown_table() -> str:
    """The README's layout table, generated from the registry (a test keeps the README in sync)."""
    rows = ["| layout | read | write | heads | loaded by | what it is |", "|---|---|---|---|---|---|"]
    for layout in sorted(draft_layouts().values(), key=lambda layout: (layout.writable, layout.detect_priority)):
        rows.append(f"| `{layout.name}` | {'yes' if layout.readable else 'no'} | "
                    f"{'yes' if layout.writable else 'no'} | "
                    f"{', '.join(KINDS[k].title for k in layout.kinds)} | {layout.engine} | "
                    f"{layout.summary} |")
    return "\n".join(rows)
