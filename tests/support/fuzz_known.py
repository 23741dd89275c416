"""The failures the fuzzer finds on this branch that another helper of issue 29 is fixing in parallel: ONE place, each
with its owner, so the lead can drop an entry once that fix is merged. A failure that matches no entry fails the
suite's short runs; an entry that no longer matches anything costs nothing (remove it).

Entry: (owner, family, what the run did or why it failed: a regex searched in "what: why")."""

from __future__ import annotations

import re

KNOWN: list[tuple[str, str, str]] = [
    # issue 29 point 6: `vocab-map check` lets through bad maps; one rule set for check / bench / convert; t2d dtype
    ("t29-maps", "maps", r"accepted a map that is not valid"),
    # point 7: a zero-byte map -> "torch.load(weights_only=True): ." (no reason); a .pt list of floats or of lists ->
    # "holds a list, not a list or tensor"
    ("t29-maps", "maps", r"weights_only=True\): \.|holds a list, not a list"),
    # map readers beside those: a zero-byte .npy ends in click's "Aborted!" (numpy's EOFError); a list with an id past
    # int64 escapes as "Overflow when unpacking long"; torch's pickle-protocol UserWarning lands on stderr
    ("t29-maps", "maps", r"Aborted!|Overflow when unpacking|UserWarning: Detected pickle protocol"),
    # not in issue 29's list, same readers: bits flipped in a .npy header escape numpy's parser as tokenize.TokenError
    ("t29-maps", "maps", r"TokenError"),
    # point 2: texts that are not UTF-8 -> a UnicodeDecodeError traceback; the one reader (t29-text) also owns rows
    # nested past Python's recursion limit (json's RecursionError) and the {"conversations": 5} message (point 7)
    ("t29-text", "texts", r"UnicodeDecodeError|RecursionError|does not say what is wrong"),
    # not in issue 29's list, same reader: {"turns": "t5"} read as the turns "t" and "5" (fixed on main by t29-text)
    ("t29-text", "texts", r"turns holds a str"),
    # point 3: one long corpus line holds memory (and time) without bound while it is encoded
    ("t29-bounded", "texts", r"tokens.*(hung|memory)"),
    # point 4: a config count of 10**30 drives a loop (a hang) or an allocation (MemoryError) in convert --mtp / inspect
    # (CPython's "SystemError: error return without exception set": the same allocation refused by the memory limit)
    ("t29-inspect", "mtp", r"(config-count|config-key|10\*\*30).*(: hung|: memory|SystemError: error return)"),
]


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


# The seeded cases of issue 29 that fail on this branch until their owner's fix is merged: {seed: (owner, runs)}.
# runs=False: the case hangs or fills memory until fixed, so running it would spend its whole time bound.
KNOWN_SEEDS: dict[str, tuple[str, bool]] = {
    "negative-id map": ("t29-maps", True),
    "zero-byte map": ("t29-maps", True),
    "list of floats": ("t29-maps", True),
    "ff fe prompts (bench)": ("t29-text", True),
    "ff fe documents (context bench)": ("t29-text", True),
    "ff fe prompts (coverage)": ("t29-text", True),
    "ff fe corpus (build)": ("t29-text", True),
    '{"conversations": 5} (build)': ("t29-text", True),
    "2M-token line (build)": ("t29-bounded", False),
    "num_nextn_predict_layers 10**30 (convert --mtp)": ("t29-inspect", False),
    "num_nextn_predict_layers 10**30 (inspect)": ("t29-inspect", False),
    "n_routed_experts 10**30 (convert --mtp)": ("t29-inspect", False),  # a MemoryError after ~8 s of allocating
    "n_routed_experts 10**30 (inspect)": ("t29-inspect", False),
}
