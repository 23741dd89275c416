"""`vocab-map convert` and `vocab-map check` (api.py is their door): a map file read, checked once, and written in
another format or into a head; every finding of the one check, for a head or a map file. Also where any map goes
(MapOutput, write_output), for the counted maps benchmark/vocab_maps.py builds."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .formats import StorageFormat
    from .map import VocabMap


@dataclass(frozen=True)
class MapOutput:
    """Where a map goes: -o OUT (a folder), its --format (None: the producer's own), --force, and --apply-to HEAD
    (then OUT is the head with the map written into it)."""
    out: Path
    format: str | None = None
    force: bool = False
    apply_to: str | None = None


@dataclass
class VocabMapResult:
    files: list[Path]
    maps: list[VocabMap]
    format: str
    findings: list = field(default_factory=list)
    counts: dict | None = None  # build: samples, tokens, skipped, prompt-only rows, distinct ids, cache
    applied: dict | None = None  # --apply-to: the head written, and whether its rows were permuted

    def to_dict(self) -> dict:
        return {"files": [str(f) for f in self.files], "format": self.format,
                "maps": [{"draft_vocab_size": m.draft_vocab_size, "target_vocab_size": m.target_vocab_size,
                          "ascending": m.ascending} for m in self.maps],
                "findings": [f.as_dict() for f in self.findings], "counts": self.counts, "applied": self.applied}


def target_vocab(target: str | None, size: int | None) -> int | None:
    from ..checkpoint.open import open_input
    from .map import config_vocab_size
    from .rules import VocabMapError

    if target is None:
        return size
    local = Path(target) / "config.json"  # a local folder: its config alone (no weights needed to size a map)
    config = json.loads(local.read_text()) if local.is_file() else open_input(target, role="target").checkpoint.config
    stated = config_vocab_size(config)
    if stated is None:
        raise VocabMapError(f"{target}'s config states no vocab_size.", "Pass --target-vocab-size N.")
    if size is not None and stated != size:
        raise VocabMapError(f"--target-vocab-size {size} disagrees with the target's config vocabulary ({stated}).",
                            "Pass one of the two.")
    return stated


def write_output(maps: list[VocabMap], output: MapOutput, fmt: StorageFormat, inputs: list[Path],
           describes_head: bool) -> tuple[list[Path], dict | None]:
    from ..checkpoint.open import open_input
    from .head import apply_to_head, check_out, write_maps
    from .rules import VocabMapError

    check_out(output.out, output.force, inputs + ([Path(output.apply_to)] if output.apply_to else []))
    if not output.apply_to:
        return write_maps(maps, fmt, output.out, output.force), None
    if len(maps) != 1:
        raise VocabMapError(f"--apply-to writes one map into the head, but {len(maps)} sizes were asked for.",
                            "Pass a single -n with --apply-to.")
    head = Path(output.apply_to)
    wanted = maps[0].sorted() if fmt.ascending_only else maps[0]
    done = apply_to_head(open_input(head).checkpoint, head, wanted, output.out, output.force, describes_head)
    return [output.out / "model.safetensors"], {"head": str(head), "out": str(done.out), "permuted": done.permuted}


def vocab_convert(source: str, output: MapOutput, *, from_format: str | None = None, target: str | None = None,
                  target_vocab_size: int | None = None) -> VocabMapResult:
    """A map file into another format (losslessly), or into a head (--apply-to), after the one check."""
    from .check import MapFacts, check_map, refuse_errors, stated_vocab
    from .formats import FORMATS, format_for, read_stored
    from .map import VocabMap
    from .rules import VocabMapError

    if output.format is None:
        raise VocabMapError("vocab-map convert needs --format.", f"Use one of: {', '.join(FORMATS)}.")
    fmt = format_for(output.format)
    stored = read_stored(Path(source), from_format)
    needs = f"--format {fmt.name}" if fmt.ascending_only and not output.apply_to else None
    facts = MapFacts(source, stored.d2t, stored.t2d, target_vocab(target, target_vocab_size),
                     ascending_required=needs)
    findings = check_map(facts)
    refuse_errors(findings, source)
    vmap = VocabMap.from_d2t(stored.d2t, stated_vocab(facts))  # without a target: t2d's length (a note says so)
    files, applied = write_output([vmap], output, fmt, list(stored.files), describes_head=True)
    return VocabMapResult(files, [vmap], fmt.name, findings, applied=applied)


@dataclass
class VocabCheckReport:
    label: str
    kind: str  # "head" or the map file's format
    findings: list
    vocab_size: int | None
    draft_vocab_size: int | None
    ascending: bool | None

    @property
    def ok(self) -> bool:
        from .check import errors_of

        return not errors_of(self.findings)

    def to_dict(self) -> dict:
        return {"path": self.label, "kind": self.kind, "ok": self.ok, "vocab_size": self.vocab_size,
                "draft_vocab_size": self.draft_vocab_size, "ascending": self.ascending,
                "findings": [f.as_dict() for f in self.findings]}


def vocab_check(path: str, *, target: str | None = None, target_vocab_size: int | None = None,
                from_format: str | None = None) -> VocabCheckReport:
    """Every finding of the one check, for a head's folder or a map file; nothing is refused here (the CLI exits 1
    on an error finding)."""
    from ..checkpoint.open import open_input
    from .check import MapFacts, check_map, stated_vocab
    from .formats import read_stored
    from .head import head_facts

    vocab = target_vocab(target, target_vocab_size)
    if Path(path).is_dir() or not Path(path).exists():
        facts, kind = head_facts(open_input(path).checkpoint, vocab), "head"
    else:
        stored = read_stored(Path(path), from_format)
        facts, kind = MapFacts(path, stored.d2t, stored.t2d, vocab), stored.format
    findings = check_map(facts)
    d2t = facts.d2t
    ascending = None if d2t is None or d2t.dim() != 1 else bool((d2t[1:] >= d2t[:-1]).all())
    return VocabCheckReport(path, kind, findings, stated_vocab(facts),
                            d2t.numel() if d2t is not None else facts.lm_head_rows, ascending)
