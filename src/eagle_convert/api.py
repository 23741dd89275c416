"""The Python API: one function per CLI command. The CLI is a thin shell over these."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from .benchmark.chat import ChatTokenizer
from .benchmark.token_counts import CountSettings, count_tokens
from .benchmark.unknown_tokens import warn_unknown_counts
from .checkpoint.open import open_input
from .conversion.converter import ConversionResult, convert
from .conversion.mtp_extract import MtpResult, MtpSettings, extract_mtp
from .errors import EagleConvertError
from .inspection.report import InspectReport, inspect
from .vocab.check import MapFacts, check_map, errors_of, refuse_errors, stated_vocab
from .vocab.formats import DEFAULT_FORMAT, FORMATS, StorageFormat, format_for, read_stored
from .vocab.head import apply_to_head, check_out, head_facts, write_maps
from .vocab.map import VocabMap, config_vocab_size
from .vocab.rules import VocabMapError, rule_for
from .vocab.selection import select


def bench(*args, **kwargs):
    """Run the draft/verify benchmark (our runner, or an engine); see `eagle_convert.benchmark.api.bench` for the
    arguments."""
    from .benchmark.api import bench as _bench  # torch model code loads only when benchmarking

    return _bench(*args, **kwargs)


__all__ = ["ConversionResult", "CountSettings", "CoverageReport", "CoverageSources", "InspectReport", "MapOutput",
           "MtpResult", "MtpSettings", "VocabCheckReport", "VocabMapResult", "bench", "convert", "extract_mtp",
           "inspect", "vocab_build", "vocab_check", "vocab_convert", "vocab_coverage"]


# `vocab-map`: draft vocabulary maps built (counting needs the chat renderer, benchmark/), converted, checked and
# written into heads (vocab/). One function per subcommand.

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


def _target_vocab(target: str | None, size: int | None) -> int | None:
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


def _write(maps: list[VocabMap], output: MapOutput, fmt: StorageFormat, inputs: list[Path],
           describes_head: bool) -> tuple[list[Path], dict | None]:
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


def vocab_build(target: str, prompts: str, sizes: list[int], settings: CountSettings,
                output: MapOutput) -> VocabMapResult:
    """Count the corpus once (or read the cached counts) the `settings.compat` producer's way, select every size."""
    folder = Path(target)
    if not (folder / "tokenizer.json").is_file() or not (folder / "config.json").is_file():
        raise VocabMapError(f"{target} is not a local target folder with config.json and tokenizer.json.",
                            "Counting renders the corpus with the target's own tokenizer and chat template; "
                            "download the target first (huggingface-cli download).")
    fmt = format_for(output.format or DEFAULT_FORMAT[rule_for(settings.compat).compat])
    check_out(output.out, output.force, [folder, Path(prompts)])  # before counting: refuse early
    vocab = config_vocab_size(json.loads((folder / "config.json").read_text()))
    if vocab is None:
        raise VocabMapError(f"{target}'s config.json states no vocab_size (nor text_config.vocab_size).",
                            "t2d is sized by the config vocabulary; give the target's own config.json.")
    try:
        counted = count_tokens(folder, prompts, settings)
    except (ValueError, jinja2.TemplateError) as error:
        if isinstance(error, EagleConvertError):
            raise
        raise VocabMapError(f"The target's chat template could not render the corpus: {error}.",
                            "Give a target folder whose tokenizer_config.json (or chat_template.jinja) holds its "
                            "chat template.") from error
    warn_unknown_counts(ChatTokenizer.from_dir(folder).tokenizer, counted.counts.counts, str(prompts))
    maps = [select(counted.counts, n, vocab, settings.compat, _special_ids(folder)) for n in sizes]
    files, applied = _write(maps, output, fmt, [folder, Path(prompts)], describes_head=False)
    counts = {**{k: v for k, v in counted.counts.as_json().items() if k not in ("ids", "counts")},
              "distinct": len(counted.counts.counts), "prompt_only_rows": counted.prompt_only_rows,
              "cache_file": str(counted.cache_file), "cache_used": counted.cache_used}
    return VocabMapResult(files, maps, fmt.name, counts=counts, applied=applied)


def _special_ids(folder: Path) -> list[int]:
    """bos, eos, pad, unk: the ids NeMo forces into the draft vocabulary first."""
    chat = ChatTokenizer.from_dir(folder)
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    ids = [chat.tokenizer.token_to_id(chat.special_tokens[n]) for n in names if n in chat.special_tokens]
    return [i for i in ids if i is not None]


def vocab_convert(source: str, output: MapOutput, *, from_format: str | None = None, target: str | None = None,
                  target_vocab_size: int | None = None) -> VocabMapResult:
    """A map file into another format (losslessly), or into a head (--apply-to), after the one check."""
    if output.format is None:
        raise VocabMapError("vocab-map convert needs --format.", f"Use one of: {', '.join(FORMATS)}.")
    fmt = format_for(output.format)
    stored = read_stored(Path(source), from_format)
    needs = f"--format {fmt.name}" if fmt.ascending_only and not output.apply_to else None
    facts = MapFacts(source, stored.d2t, stored.t2d, _target_vocab(target, target_vocab_size),
                     ascending_required=needs)
    findings = check_map(facts)
    refuse_errors(findings, source)
    vmap = VocabMap.from_d2t(stored.d2t, stated_vocab(facts))  # without a target: t2d's length (a note says so)
    files, applied = _write([vmap], output, fmt, list(stored.files), describes_head=True)
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
        return not errors_of(self.findings)

    def to_dict(self) -> dict:
        return {"path": self.label, "kind": self.kind, "ok": self.ok, "vocab_size": self.vocab_size,
                "draft_vocab_size": self.draft_vocab_size, "ascending": self.ascending,
                "findings": [f.as_dict() for f in self.findings]}


def vocab_check(path: str, *, target: str | None = None, target_vocab_size: int | None = None,
                from_format: str | None = None) -> VocabCheckReport:
    """Every finding of the one check, for a head's folder or a map file; nothing is refused here (the CLI exits 1
    on an error finding)."""
    vocab = _target_vocab(target, target_vocab_size)
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


@dataclass(frozen=True)
class CoverageSources:
    """The draft vocabularies `vocab_coverage` measures: one map per size in `sizes`, built from `corpus` (the
    prompts file when None) with `counting`'s producer rules; a map file (`map_file`, any registry format); a head's
    own map (`head`: its d2t, or the whole vocabulary for a head without one)."""
    sizes: tuple[int, ...] = ()
    counting: CountSettings | None = None
    corpus: str | None = None
    map_file: str | None = None
    map_format: str | None = None
    head: str | None = None


@dataclass
class CoverageReport:
    stream: dict  # prompts, generated tokens, max_new_tokens, how it was decoded
    rows: list  # benchmark.coverage.Coverage, one per draft vocabulary
    counts: dict | None = None  # the counting behind built maps: samples, tokens, cache

    def to_dict(self) -> dict:
        return {"stream": self.stream, "rows": [r.to_dict() for r in self.rows], "counts": self.counts}


def _coverage_vocabularies(target: Path, prompts: str, sources: CoverageSources, vocab: int):
    """(label, target ids) per vocabulary, and the counting's summary; every refusal before the target runs."""
    import torch

    from .vocab.token_map import read_token_map

    found, counts = [], None
    if sources.sizes:
        corpus = sources.corpus or prompts
        counted = count_tokens(target, corpus, sources.counting)
        if not counted.counts.tokens:
            raise VocabMapError(f"{corpus}: counting the {sources.counting.compat} way counted no token (rows without "
                                "an assistant turn count nothing under its loss mask).",
                                "Give --corpus with the assistant's answers (the data the head trains on), or "
                                "--compat modelopt, which counts every template token.")
        counts = {"corpus": str(corpus), "compat": sources.counting.compat, "samples": counted.counts.samples,
                  "tokens": counted.counts.tokens, "distinct": len(counted.counts.counts),
                  "cache_file": str(counted.cache_file), "cache_used": counted.cache_used}
        found += [(f"{sources.counting.compat} N={n}",
                   select(counted.counts, n, vocab, sources.counting.compat, _special_ids(target)).ids_tensor())
                  for n in sources.sizes]
    if sources.map_file:
        found.append((f"map {sources.map_file}",
                      read_token_map(sources.map_file, vocab, sources.map_format).ids_tensor()))
    if sources.head:
        facts = head_facts(open_input(sources.head, role="draft").checkpoint, vocab)
        refuse_errors(check_map(facts), sources.head)
        if facts.d2t is None:
            found.append((f"head {sources.head} (no d2t: the whole vocabulary)", torch.arange(vocab)))
        else:
            found.append((f"head {sources.head} (d2t)", VocabMap.from_d2t(facts.d2t, vocab).ids_tensor()))
    if not found:
        raise VocabMapError("vocab-map coverage was given no draft vocabulary to measure.",
                            "Pass -n N (with --compat), --map FILE or --head HEAD.")
    return found, counts


def vocab_coverage(target: str, prompts: str, sources: CoverageSources, *, max_new_tokens: int = 128,
                   progress: bool = False) -> CoverageReport:
    """The share of the target's own greedy tokens on `prompts` that each draft vocabulary cannot propose: a hard
    ceiling on per-position acceptance (benchmark/coverage.py counts, benchmark/stream.py decodes)."""
    from .benchmark.coverage import coverage
    from .benchmark.stream import greedy_stream

    folder = Path(target)
    if not (folder / "config.json").is_file():
        raise VocabMapError(f"{target} is not a local target folder.", "coverage runs the target: download it first.")
    vocab = config_vocab_size(json.loads((folder / "config.json").read_text()))
    vocabularies, counts = _coverage_vocabularies(folder, prompts, sources, vocab)
    stream = greedy_stream(folder, prompts, max_new_tokens, progress=progress)
    flat = stream.flat()
    return CoverageReport(stream.to_dict(), [coverage(flat, ids, label) for label, ids in vocabularies], counts)
