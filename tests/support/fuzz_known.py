"""The failures the fuzzer finds that a helper is fixing in parallel: ONE place, each with its owner, so the lead can
drop an entry once that fix is merged. A failure that matches no entry fails the suite's short runs; an entry that no
longer matches anything costs nothing (remove it). Empty since issue 29's fixes and issue 33's last findings were
merged: keep it so, adding an entry only for a fix that is under way elsewhere.

Entry: (owner, family, what the run did or why it failed: a regex searched in "what: why")."""

from __future__ import annotations

import re

KNOWN: list[tuple[str, str, str]] = []


def owner(family: str, text: str) -> str | None:
    """The helper whose fix this failure waits for, or None (a failure nobody owns: a real finding)."""
    return next((who for who, fam, pattern in KNOWN if fam == family and re.search(pattern, text, re.S)), None)


def unowned(summary: dict) -> list[tuple]:
    return [f for f in summary["failures"] if owner(summary["family"], f"{f[1]}: {f[2]}") is None]


def by_owner(summary: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in summary["failures"]:
        who = owner(summary["family"], f"{f[1]}: {f[2]}") or "unowned"
        counts[who] = counts.get(who, 0) + 1
    return counts


# The seeded cases that fail until their owner's fix is merged: {seed: (owner, runs)}, an xfail(strict) each.
# runs=False: the case hangs or fills memory until fixed, so running it would spend its whole time bound.
KNOWN_SEEDS: dict[str, tuple[str, bool]] = {}
