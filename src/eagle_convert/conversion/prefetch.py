"""What `eagle-convert convert` starts before it imports torch (~1.5-2 s in which the disk and one core would idle):
the few small reads of metadata the plan needs, then reading and hashing the whole draft in the background.

Order matters: background reads fill the disk's queue, and a small read issued after them waits its turn, so the
target's config, index and LM-head header and the draft's zip directory are read first. Torch-free and best effort:
anything unexpected is left for the conversion to report, with the real message."""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..io.digest import PREHASH, tensor_ranges
from ..io.readahead import WARMER
from ..io.source import LocalSource, find_weights, read_json, read_safetensors_header
from ..spec import TARGET_EMBED, TARGET_LM_HEAD
from ..targets import FAMILIES

# An untied target's LM head, then a tied one's embedding, in every family's namings (targets/; torch-free).
LM_HEAD_NAMES = tuple(dict.fromkeys([TARGET_LM_HEAD, *(n.lm_head for f in FAMILIES.values() for n in f.namings),
                                     TARGET_EMBED, *(n.embed for f in FAMILIES.values() for n in f.namings)]))


def read_target_metadata(folder: str) -> None:
    """config.json, the index, and the header of the shard that holds the LM head: exactly their bytes (a
    LocalSource reads no readahead window around them)."""
    source = LocalSource(folder)
    read_json(source, "config.json")
    fmt, weight_map, files = find_weights(source)
    if fmt != "safetensors":
        return
    shard = next((weight_map[n] for n in LM_HEAD_NAMES if n in weight_map), None) if weight_map else files[0]
    if shard:
        read_safetensors_header(source, shard)


def start_early_reads(draft: str, target: str) -> None:
    """For local folders: warm the target's metadata, then read and hash the draft in the background."""
    if Path(target).is_dir():
        with contextlib.suppress(Exception):
            read_target_metadata(target)
    if not Path(draft).is_dir():
        return
    with contextlib.suppress(Exception):
        source = LocalSource(draft)
        read_json(source, "config.json")
        ranges = tensor_ranges(draft)  # reads the zip directory or safetensors headers
        WARMER.add_files([source.local_path(rel) for rel in find_weights(source)[2]])
        PREHASH.start(ranges)

