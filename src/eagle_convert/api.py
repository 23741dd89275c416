"""The Python API, one function per CLI command, and the one door the CLI comes through (cli/ imports nothing else
of the library but the settings it parses and the typed errors). Importing it is cheap: torch and the tokenizers
load when a function first needs them, so the CLI can start reading a draft from disk while they do.

Every function takes settings objects (settings/); the public ones also take them spelled as keywords, as README and
docs/ show them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .conversion.prefetch import start_early_reads  # noqa: F401 (the CLI's: reads while torch loads)
from .io.background import end_reads  # noqa: F401 (the CLI's: the early reads ended)
from .io.interrupts import forget_outputs, handled_signals, interrupted_line  # noqa: F401 (the CLI's signals)
from .settings.common import HubOptions
from .settings.convert import ConvertSettings, InspectSettings, TargetTensors
from .settings.declare import refuse_leftovers

if TYPE_CHECKING:  # for readers and checkers: at run time __getattr__ imports them when first asked for
    from .benchmark.token_counts import CountSettings
    from .conversion.converter import ConversionResult
    from .conversion.mtp_extract import MtpResult, MtpSettings
    from .inspection.report import InspectReport
    from .vocab.formats import StorageFormat
    from .vocab.map import VocabMap

__all__ = ["ConversionResult", "CountSettings", "CoverageReport", "CoverageSources", "InspectReport", "MapOutput",
           "MtpResult", "MtpSettings", "VocabCheckReport", "VocabMapResult", "bench", "convert", "extract_mtp",
           "inspect", "vocab_build", "vocab_check", "vocab_convert", "vocab_coverage"]


def convert(draft: str, target: str, out: str | Path | None = None, settings: ConvertSettings | None = None,
            hub: HubOptions | None = None, **keywords):
    """Convert the EAGLE head `draft` for `target` into `out` (conversion/converter.py). `settings` and `hub`, or
    the same spelled as keywords (to=, dtype=, dry_run=, force=, drop=, revision=, target_revision=, token=, ...:
    settings/convert.py and settings/common.py name them all; docs/convert.md says each)."""
    from .conversion.converter import convert as convert_with_settings

    if settings is None:
        tensors = TargetTensors.from_keywords(keywords)
        settings = ConvertSettings.from_keywords(keywords, tensors=tensors)
        hub = HubOptions.from_keywords(keywords)
    refuse_leftovers("convert", keywords)
    return convert_with_settings(draft, target, out, settings, hub or HubOptions())


def bench(target: str, draft: str | None = None, settings=None, hub: HubOptions | None = None, **keywords):
    """Run the draft/verify benchmark (our runner, or an engine): the one entry point of `eagle-convert bench` and
    of Python callers; see `eagle_convert.benchmark.entry.bench` and `bench_settings` for the arguments."""
    from .benchmark.entry import bench as bench_with_settings  # torch model code loads only when benchmarking

    return bench_with_settings(target, draft, settings, hub, **keywords)


def inspect(path: str, target: str | None = None, settings: InspectSettings | None = None,
            hub: HubOptions | None = None, **keywords):
    """PATH's layout, config, tensors and problems (inspection/report.py). `settings` and `hub`, or the same
    spelled as keywords (drop=, target_pattern=, max_model_len=, revision=, target_revision=, token=, offline=)."""
    from .inspection.report import inspect as inspect_path

    if settings is not None:
        keywords.update(drop=settings.drop, target_pattern=settings.target_pattern,
                        max_model_len=settings.max_model_len)
    if hub is not None:
        keywords.update(revision=hub.revision, target_revision=hub.target_revision, token=hub.token,
                        offline=hub.offline)
    return inspect_path(path, target, **keywords)


def layouts():
    """The draft layouts eagle-convert reads and writes, in the registry's order (`eagle-convert layouts`; the MTP
    layouts `convert --mtp` writes are listed by its --to)."""
    from .layouts.registry import draft_layouts

    return list(draft_layouts().values())


def load() -> None:
    """Import what every command's work needs (torch, the converter, the inspector) now: the CLI then freezes it out
    of the cycle collector at once."""
    from .conversion import converter  # noqa: F401
    from .inspection import report  # noqa: F401


def extract_mtp(target: str, out=None, settings=None):
    """`convert --mtp`: the MTP layers inside TARGET as a draft (conversion/mtp_extract.py; `settings`: MtpSettings)."""
    from .conversion.mtp_extract import extract_mtp as extract

    return extract(target, out) if settings is None else extract(target, out, settings)


def tree_sweep(target: str, draft: str, **keywords) -> dict:
    """`bench --tree-sweep`: the chain and a grid of tree shapes (benchmark/sweep.py)."""
    from .benchmark.sweep import run_sweep

    return run_sweep(target, draft, **keywords)


def demo(workdir: str | None = None, echo=print, k: int = 3) -> dict:
    """`eagle-convert demo`: the whole user path on a built-in example (testing/demo.py)."""
    from .testing.demo import run_demo

    return run_demo(workdir, echo=echo, k=k)


def __getattr__(name: str):
    """The result types and the renderers' helpers, imported when first asked for (torch and the tokenizers load
    with them, as they would with the work that comes before a result is rendered)."""
    if name.startswith("__"):  # Python's own probes (__path__, __wrapped__, ...) load nothing
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .benchmark import compare, context, sweep, token_counts
    from .checkpoint import index
    from .conversion import converter, plan
    from .conversion import mtp_extract as extract
    from .inspection import report

    lazy = {"ConversionResult": converter.ConversionResult, "MtpResult": extract.MtpResult,
            "MtpSettings": extract.MtpSettings, "InspectReport": report.InspectReport,
            "CountSettings": token_counts.CountSettings, "GATHER": plan.GATHER, "config_dtype": index.config_dtype,
            "compare_table": compare.compare_table, "sweep_table": sweep.sweep_table,
            "parse_lengths": context.parse_lengths}
    if name not in lazy:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return lazy[name]


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
    from .checkpoint.open import open_input
    from .vocab.map import config_vocab_size
    from .vocab.rules import VocabMapError

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
    from .checkpoint.open import open_input
    from .vocab.head import apply_to_head, check_out, write_maps
    from .vocab.rules import VocabMapError

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
    import jinja2

    from .benchmark.chat import ChatTokenizer
    from .benchmark.token_counts import count_tokens
    from .benchmark.unknown_tokens import warn_unknown_counts
    from .errors import EagleConvertError
    from .vocab.formats import DEFAULT_FORMAT, format_for
    from .vocab.head import check_out
    from .vocab.map import config_vocab_size
    from .vocab.rules import VocabMapError, rule_for
    from .vocab.selection import select

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
    from .benchmark.chat import ChatTokenizer

    chat = ChatTokenizer.from_dir(folder)
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    ids = [chat.tokenizer.token_to_id(chat.special_tokens[n]) for n in names if n in chat.special_tokens]
    return [i for i in ids if i is not None]


def vocab_convert(source: str, output: MapOutput, *, from_format: str | None = None, target: str | None = None,
                  target_vocab_size: int | None = None) -> VocabMapResult:
    """A map file into another format (losslessly), or into a head (--apply-to), after the one check."""
    from .vocab.check import MapFacts, check_map, refuse_errors, stated_vocab
    from .vocab.formats import FORMATS, format_for, read_stored
    from .vocab.map import VocabMap
    from .vocab.rules import VocabMapError

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
        from .vocab.check import errors_of

        return not errors_of(self.findings)

    def to_dict(self) -> dict:
        return {"path": self.label, "kind": self.kind, "ok": self.ok, "vocab_size": self.vocab_size,
                "draft_vocab_size": self.draft_vocab_size, "ascending": self.ascending,
                "findings": [f.as_dict() for f in self.findings]}


def vocab_check(path: str, *, target: str | None = None, target_vocab_size: int | None = None,
                from_format: str | None = None) -> VocabCheckReport:
    """Every finding of the one check, for a head's folder or a map file; nothing is refused here (the CLI exits 1
    on an error finding)."""
    from .checkpoint.open import open_input
    from .vocab.check import MapFacts, check_map, stated_vocab
    from .vocab.formats import read_stored
    from .vocab.head import head_facts

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

    from .benchmark.token_counts import count_tokens
    from .checkpoint.open import open_input
    from .vocab.check import check_map, refuse_errors
    from .vocab.head import head_facts
    from .vocab.map import VocabMap
    from .vocab.rules import VocabMapError
    from .vocab.selection import select
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
    from .vocab.map import config_vocab_size
    from .vocab.rules import VocabMapError

    folder = Path(target)
    if not (folder / "config.json").is_file():
        raise VocabMapError(f"{target} is not a local target folder.", "coverage runs the target: download it first.")
    vocab = config_vocab_size(json.loads((folder / "config.json").read_text()))
    vocabularies, counts = _coverage_vocabularies(folder, prompts, sources, vocab)
    stream = greedy_stream(folder, prompts, max_new_tokens, progress=progress)
    flat = stream.flat()
    return CoverageReport(stream.to_dict(), [coverage(flat, ids, label) for label, ids in vocabularies], counts)
