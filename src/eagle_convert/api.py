"""The Python API, one function per CLI command, and the one door the CLI comes through (cli/ imports nothing else
of the library but the settings it parses and the typed errors). Importing it is cheap: torch and the tokenizers
load when a function first needs them, so the CLI can start reading a draft from disk while they do.

Every function takes settings objects (settings/); the public ones also take them spelled as keywords, as README and
docs/ show them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .benchmark.vocab_maps import CoverageReport, CoverageSources, vocab_build, vocab_coverage  # `vocab-map`
from .conversion.prefetch import start_early_reads  # noqa: F401 (the CLI's: reads while torch loads)
from .io.background import end_reads  # noqa: F401 (the CLI's: the early reads ended)
from .io.interrupts import forget_outputs, handled_signals, interrupted_line  # noqa: F401 (the CLI's signals)
from .settings.common import HubOptions
from .settings.convert import ConvertSettings, InspectSettings, TargetTensors
from .settings.declare import refuse_leftovers
from .vocab.service import MapOutput, VocabCheckReport, VocabMapResult, vocab_check, vocab_convert  # `vocab-map`

if TYPE_CHECKING:  # for readers and checkers: at run time __getattr__ imports them when first asked for
    from .benchmark.token_counts import CountSettings
    from .conversion.converter import ConversionResult
    from .conversion.mtp_extract import MtpResult, MtpSettings
    from .inspection.report import InspectReport

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
