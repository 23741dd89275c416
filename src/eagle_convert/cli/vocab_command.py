"""`eagle-convert vocab-map`: build, convert and check draft vocabulary maps (d2t / t2d). Parses, calls the library
(api.vocab_build / vocab_convert / vocab_check) and renders; every refusal is one paragraph and exit 1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .. import api
from ..settings.declare import cli_option
from ..settings.vocab import COMPAT, FORMAT, FROM_FORMAT
from .exit_codes import EXIT_ERROR, handle_errors, paragraph


def _api():
    return api


def _signals():
    """SIGINT, SIGTERM and SIGHUP handled as convert handles them (io/interrupts.py): staged output removed, one
    line said, and, while the corpus is read and tokenized, an exit at once."""
    return api.handled_signals()


def _emit(as_json: bool, payload: dict, human: list[str]) -> None:
    click.echo(json.dumps(payload, indent=2, default=str) if as_json else "\n".join(human))


def _finding_lines(findings) -> list[str]:
    return [paragraph(f"{'error' if f.error else 'note'}: {f.name}: {f.message} ({f.engines}).")
            for f in findings]


def _output_lines(result) -> list[str]:
    lines = []
    if result.applied:
        lines.append(f"wrote the map into {result.applied['out']} (from {result.applied['head']}; LM-head rows "
                     f"{'permuted to the new order' if result.applied['permuted'] else 'already in this order'})")
    for vmap in result.maps:
        order = "ascending" if vmap.ascending else "not ascending (draft order kept)"
        lines.append(f"map: {vmap.draft_vocab_size} draft ids over a target vocabulary of "
                     f"{vmap.target_vocab_size or 'unstated'}, {order}")
    lines += [f"wrote {f}" for f in result.files if not result.applied]
    return lines


@click.group("vocab-map")
def vocab_map() -> None:
    """Draft vocabulary maps (d2t / t2d) for EAGLE-3 heads: built the way each trainer builds them, converted
    between the trainers' and engines' files, checked, and written into a head."""


_output = [
    click.option("--out", "-o", required=True, type=click.Path(path_type=Path),
                 help="Output folder (written atomically); with --apply-to, the new head."),
    click.option("--apply-to", metavar="HEAD", help="Write the map into this draft checkpoint instead (safetensors), "
                 "permuting its LM-head rows when the order changes; refuses a different set of ids."),
    click.option("--force", is_flag=True, help="Replace an existing output folder."),
    click.option("--json", "as_json", is_flag=True, help="Machine-readable output."),
]


def _with(options):
    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command
    return decorate


@vocab_map.command("build")
@click.option("--target", "-t", required=True, help="Target folder: its tokenizer.json, chat template and config.")
@click.option("--prompts", required=True, type=click.Path(exists=True, dir_okay=False),
              help="JSONL corpus: {\"conversations\": [...]} / {\"messages\": [...]} rows (the assistant turns are "
                   "what the trainers count), or bench's {\"turns\"}/{\"prompt\"} rows (user turns only).")
@click.option("-n", "sizes", multiple=True, required=True, type=click.IntRange(1),
              help="Draft vocabulary size; repeat for several (one pass over the corpus serves them all).")
@cli_option(COMPAT, "compat", required=True,
            help="Whose rules: mask, length, tie-break, padding and order (docs/vocab-maps.md).")
@cli_option(FORMAT, "fmt", "File format (default: the producer's).")
@click.option("--max-length", default=2048, show_default=True, type=click.IntRange(1),
              help="Token limit per sample (truncated or dropped, as the producer does).")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Where counts are cached "
              "(default: $XDG_CACHE_HOME/eagle-convert/vocab-counts).")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@_with(_output)
@handle_errors
def build(target, prompts, sizes, compat, fmt, max_length, cache_dir, quiet, out, apply_to, force, as_json):
    """Count the corpus the --compat trainer's way and write its map for every -n."""
    api = _api()
    settings = api.CountSettings(compat, max_length, cache_dir, progress=not quiet)  # stderr: --json's stdout stays
    with _signals():
        result = api.vocab_build(target, prompts, list(sizes), settings, api.MapOutput(out, fmt, force, apply_to))
    c = result.counts
    source = f"cached counts ({c['cache_file']})" if c["cache_used"] else f"counted now, cached in {c['cache_file']}"
    lines = [f"{compat}: {c['tokens']} tokens counted in {c['samples']} samples, {c['distinct']} distinct ids; "
             f"{source}"]
    if c["skipped"]:
        lines.append(f"{c['skipped']} samples skipped or dropped by the length rule (--max-length {max_length})")
    if c["prompt_only_rows"]:
        lines.append(f"{c['prompt_only_rows']} rows have no assistant turn"
                     + (": counted whole (modelopt counts every template token)" if compat == "modelopt"
                        else ": nothing of them is counted (the loss mask covers assistant turns only)"))
    _emit(as_json, result.to_dict(), lines + _output_lines(result))


@vocab_map.command("convert")
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@cli_option(FORMAT, "fmt", "Output format.", required=True)
@cli_option(FROM_FORMAT, "from_format",
            help="Input format, when the file does not say (a .pt of one tensor: modelopt or sglang).")
@click.option("--target", "-t", help="Target whose config vocabulary sizes t2d (a map without t2d needs it).")
@click.option("--target-vocab-size", type=click.IntRange(1), help="The config vocabulary, instead of --target.")
@_with(_output)
@handle_errors
def convert(source, fmt, from_format, target, target_vocab_size, out, apply_to, force, as_json):
    """Convert a map file between formats, losslessly, after checking it; or write it into a head (--apply-to)."""
    api = _api()
    result = api.vocab_convert(source, api.MapOutput(out, fmt, force, apply_to), from_format=from_format,
                               target=target, target_vocab_size=target_vocab_size)
    _emit(as_json, result.to_dict(), _finding_lines(result.findings) + _output_lines(result))


@vocab_map.command("check")
@click.argument("path")
@click.option("--target", "-t", help="Check sizes against this target's config vocabulary (text_config included).")
@click.option("--target-vocab-size", type=click.IntRange(1), help="The config vocabulary, instead of --target.")
@cli_option(FROM_FORMAT, "from_format", help="A map file's format, if ambiguous.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@handle_errors
def check(path, target, target_vocab_size, from_format, as_json):
    """Check a head's map (a folder) or a map file: every silent-failure class, by name; exit 1 on an error."""
    report = _api().vocab_check(path, target=target, target_vocab_size=target_vocab_size, from_format=from_format)
    order = {None: "order unknown", True: "ascending", False: "not ascending"}[report.ascending]
    head = [f"{path} ({report.kind}): {report.draft_vocab_size} draft ids, target vocabulary "
            f"{report.vocab_size or 'unstated'}, {order}"]
    _emit(as_json, report.to_dict(), head + _finding_lines(report.findings)
          + ([] if report.findings else ["no findings"]))
    if not report.ok:
        names = ", ".join(f.name for f in report.findings if f.error)
        if not as_json:
            click.echo(paragraph(f"error: {path}: the map has errors ({names}); engines would read it wrongly."),
                       err=True)
        sys.exit(EXIT_ERROR)


@vocab_map.command("coverage")
@click.option("--target", "-t", required=True, help="Target folder: it generates the stream (our runner, greedy).")
@click.option("--prompts", required=True, type=click.Path(exists=True, dir_okay=False),
              help="JSONL prompts whose first user turns the target answers (bench's or build's rows).")
@click.option("-n", "sizes", multiple=True, type=click.IntRange(1),
              help="Draft vocabulary size of a map built from --corpus (repeat for several; needs --compat).")
@cli_option(COMPAT, "compat", "Whose rules build the -n maps (as vocab-map build).")
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False),
              help="The corpus the -n maps are counted from (default: --prompts; a loss mask counts only assistant "
                   "turns, so give the data the head trains on).")
@click.option("--map", "map_file", type=click.Path(exists=True, dir_okay=False),
              help="An existing map file (any format vocab-map reads; a .pt of one tensor is SGLang's token map).")
@cli_option(FROM_FORMAT, "from_format", help="--map's format, if ambiguous.")
@click.option("--head", help="An existing head: its own d2t (or the whole vocabulary for a head without one).")
@click.option("--max-new-tokens", default=128, show_default=True, type=click.IntRange(1),
              help="Tokens the target generates per prompt.")
@click.option("--max-length", default=2048, show_default=True, type=click.IntRange(1), help="As vocab-map build.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Where counts are cached (as vocab-map build).")
@click.option("--threads", type=click.IntRange(1), help="torch CPU threads (default: torch's choice).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@handle_errors
def coverage(target, prompts, sizes, compat, corpus, map_file, from_format, head, max_new_tokens, max_length,
             cache_dir, threads, as_json, quiet):
    """The share of the target's own greedy tokens on PROMPTS that each draft vocabulary cannot propose: a hard
    ceiling on per-position acceptance, per -n (and for --map / --head)."""
    if sizes and not compat:
        raise click.UsageError("-n builds maps the --compat producer's way: pass --compat too.")
    if not (sizes or map_file or head):
        raise click.UsageError("Nothing to measure: pass -n N (with --compat), --map FILE or --head HEAD.")
    if threads:
        import torch

        torch.set_num_threads(threads)
    api = _api()
    progress = not quiet  # on stderr: --json's stdout stays pure JSON
    counting = api.CountSettings(compat, max_length, cache_dir, progress=progress) if sizes else None
    sources = api.CoverageSources(tuple(sizes), counting, corpus, map_file, from_format, head)
    with _signals():
        report = api.vocab_coverage(target, prompts, sources, max_new_tokens=max_new_tokens, progress=progress)
    _emit(as_json, report.to_dict(), coverage_lines(report.to_dict()))


def coverage_lines(data: dict) -> list[str]:
    s = data["stream"]
    lines = [f"stream: {s['generated_tokens']} tokens the target generated greedily over {s['prompts']} prompts "
             f"(first turns, up to {s['max_new_tokens']} new tokens each)"]
    if data["counts"]:
        c = data["counts"]
        lines.append(f"maps built from {c['corpus']} the {c['compat']} way: {c['tokens']} tokens counted in "
                     f"{c['samples']} samples, {c['distinct']} distinct ids")
    width = max(len(r["label"]) for r in data["rows"])
    lines.append(f"{'draft vocabulary':<{width}}  {'size':>7}  {'outside':>7}  {'share outside':>13}  "
                 f"{'ceiling':>7}  {'distinct ids outside':>20}")
    for r in data["rows"]:
        share = "-" if r["outside_share"] is None else f"{r['outside_share']:.4f}"
        ceiling = "-" if r["acceptance_ceiling"] is None else f"{r['acceptance_ceiling']:.4f}"
        lines.append(f"{r['label']:<{width}}  {r['draft_vocab_size']:>7}  {r['outside_tokens']:>7}  {share:>13}  "
                     f"{ceiling:>7}  {str(r['outside_distinct']) + ' of ' + str(r['stream_distinct']):>20}")
    lines.append("ceiling = 1 - share outside: at a position whose target token is outside the draft vocabulary, no "
                 "draft can be accepted")
    return lines
