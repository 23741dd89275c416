"""The `eagle-convert bench` command: a thin shell over `eagle_convert.bench`, plus the CI gate (exit code 3)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .context_table import context_report
from .engine import check_engine_usage, engine_from, engine_options, engine_requested
from .errors import EXIT_GATE, handle_errors, paragraph
from .positions import allow_rope_mismatch_option, max_model_len_option
from .tree import TREE_FLAGS, sweep_command, tree_options, tree_options_from, tree_report_lines


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


@click.command()
@click.option("--target", "-t", required=True, help="Target model folder (the whole model runs).")
@click.option("--draft", "-d", help="Draft head: any layout convert reads or writes (folder or repo id). Required "
                                    "except with --engine-url (the server has its head).")
@click.option("--mtp-from-target", is_flag=True,
              help="Bench the MTP layer the target ships, loaded from TARGET itself (instead of --draft; the same "
                   "as --draft TARGET). An extracted MTP folder is a --draft like any other.")
@click.option("-k", "--num-speculative-tokens", "k", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option("--max-new-tokens", default=256, show_default=True, type=click.IntRange(1))
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False),
              help='JSONL: MT-bench {"question_id", "turns": [...]}, {"prompt": "..."} or {"prompt_ids": [...]} '
                   '(default: a built-in set).')
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(0), help="0 = greedy.")
@click.option("--seed", default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--dtype", type=click.Choice(["auto", "bfloat16", "float16", "float32"]), default="auto",
              show_default=True, help="auto = bf16 on CUDA, fp32 on CPU.")
@click.option("--chat-template", type=click.Choice(["auto", "none"]), default="auto", show_default=True)
@click.option("--ignore-eos", is_flag=True, help="Generate --max-new-tokens every time (as vLLM benchmarks do).")
@click.option("--no-baseline", is_flag=True, help="Skip plain decoding (no speedup, no lossless check).")
@click.option("--min-acceptance-length", type=float, help="Exit with code 3 when τ is below this (a CI gate).")
@click.option("--reference-draft", metavar="RAW",
              help="Also bench RAW (the head as released, any layout) in the same run; exit 3 unless DRAFT behaves "
                   "exactly like it (fp32 greedy: every round; else τ within a tolerance).")
@click.option("--reference-report", type=click.Path(exists=True, dir_okay=False),
              help="A stored --json report of the same settings and prompts: exit 3 when τ dropped by more than "
                   "--max-tau-drop, overall or in any prompt category.")
@click.option("--max-tau-drop", type=click.FloatRange(0), help="With --reference-report (default 0.05).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Also write the full --json report to this file (written when a gate fails too).")
@click.option("--threads", type=click.IntRange(1), help="torch CPU threads (default: torch's choice).")
@click.option("--drop", multiple=True, metavar="PATTERN", help="Ignore draft tensors matching this glob.")
@max_model_len_option("The context length you will serve (tokens): the draft's and the target's position limits are "
                      "checked against it (default: the longest context the run uses).")
@allow_rope_mismatch_option
@click.option("--token-map", type=click.Path(exists=True, dir_okay=False),
              help="A hot-token map (SGLang's --speculative-token-map: a .pt list of target ids): the EAGLE-1 head's "
                   "LM head keeps only those rows (FR-Spec); the verify stays the target's, so output is unchanged.")
@click.option("--context-lengths", metavar="LIST",
              help="Acceptance against context length: e.g. 1k,2k,4k,8k (k = 1000 prompt tokens); long documents cut "
                   "to each length, a table per bucket (docs/long-context.md). Replaces --prompts.")
@click.option("--documents", type=click.Path(exists=True, dir_okay=False),
              help='With --context-lengths: JSONL of long documents, {"context", "question"} (LongBench-v2 style) '
                   'or {"text"} (default: the Python reference manual\'s topics, from pydoc_data).')
@click.option("--documents-per-bucket", default=4, show_default=True, type=click.IntRange(1),
              help="With --context-lengths: documents per length.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="With --context-lengths: τ and per-position acceptance against length, FILE.svg (or .png with "
                   "matplotlib).")
@click.option("--json", "as_json", is_flag=True, help="The full report (documented schema) on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr (shown with --json too: stdout stays the "
                                                    "report).")
@tree_options
@engine_options
def bench(target, draft, mtp_from_target, k, max_new_tokens, prompts, temperature, seed, device, dtype, chat_template,
          ignore_eos, no_baseline, min_acceptance_length, reference_draft, reference_report, max_tau_drop, report_path,
          threads, drop, max_model_len, allow_rope_mismatch, token_map, context_lengths, documents,
          documents_per_bucket, plot_path, as_json, quiet, **options):
    """Run TARGET with the DRAFT head (speculative decoding) and report acceptance, speed and losslessness."""
    tree_flags = {name: options.pop(name) for name in TREE_FLAGS}
    context = _context_settings(context_lengths, documents, documents_per_bucket, plot_path, prompts, tree_flags)
    engine_flags = options
    if mtp_from_target:
        if draft is not None:
            raise click.UsageError("--mtp-from-target and --draft name two drafts: pass one of them.")
        draft = target  # a draft that is the target: its own MTP layer (mtp/draft.py)
    with_engine = engine_requested(engine_flags)
    if with_engine:
        if tree_flags["tree"] != "chain" or tree_flags["tree_sweep"]:
            raise click.UsageError("--tree and --tree-sweep apply to our runner: an engine bench drafts chains "
                                   "(bench the tree without --engine / --engine-url / --compare).")
        check_engine_usage(engine_flags, draft=draft, reference_draft=reference_draft)
        if token_map:
            raise click.UsageError("--token-map restricts the head in our runner; vLLM has no hot-token map, so an "
                                   "engine bench would ignore it (bench the map without --engine / --engine-url / "
                                   "--compare).")
    elif draft is None:
        raise click.UsageError("--draft is required (except with --engine-url).")

    if threads and (not with_engine or engine_flags["compare"]):  # our runner's torch (an engine has its own)
        import torch

        torch.set_num_threads(threads)

    if tree_flags["tree_sweep"]:
        sweep = handle_errors(sweep_command)  # a bad --token-map is one paragraph here too
        return sweep(target, draft, k=k, prompts=prompts, num_prompts=tree_flags["sweep_prompts"], as_json=as_json,
                     max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, device=device, dtype=dtype,
                     chat_template=chat_template, drop=drop, ignore_eos=ignore_eos, token_map=token_map,
                     progress=not quiet)

    from ..benchmark.api import run
    from ..benchmark.compare import compare_table
    from ..benchmark.positions import bench_max_model_len
    from ..benchmark.settings import DecodeSettings, GateOptions
    from ..positions.checks import PositionOptions

    decode = DecodeSettings(k=k, tree=None if with_engine else tree_options_from(tree_flags),
                            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, ignore_eos=ignore_eos,
                            chat_template=chat_template, prompts=prompts, token_map=token_map)
    gates = GateOptions(min_acceptance_length, reference_draft, reference_report, max_tau_drop)
    engine = engine_from(engine_flags) if with_engine else None

    @handle_errors
    def go(as_json=as_json):
        longest = bench_max_model_len(max_model_len, context.lengths if context else (), max_new_tokens)
        options = dict(engine=engine, compare=with_engine and engine_flags["compare"], device=device, dtype=dtype,
                       baseline=not no_baseline, progress=not quiet, drop=drop,
                       positions=PositionOptions(longest, allow_rope_mismatch))
        if context is not None:
            from ..benchmark.context_bench import run_context

            return run_context(target, draft, decode, context, gates, **options)
        return run(target, draft, decode, gates, **options)

    from ..io.interrupts import handled_signals

    # SIGTERM and SIGHUP end a bench (and its engine processes, in sessions of their own) as Ctrl-C does; prompts and
    # documents are tokenized inside immediate() (session.py, context.py), before any engine starts
    with handled_signals():
        report = go(as_json=as_json)
    data = report.to_dict()
    for finding in (data.get("positions") or {}).get("findings", []):
        if finding["severity"] != "info" and not as_json:  # --json carries them in `positions`
            click.echo(paragraph(f"warning: [{finding['name']}] {finding['message']} {finding['hint']}"), err=True)
    table = compare_table(data["compare"]["rows"], engine.label) if report.compare is not None else None
    human = context_report(data) if context is not None else human_report(data)
    finish(report, data, report_path, "\n".join(filter(None, [human, table])), as_json)


def _context_settings(lengths, documents, per_bucket, plot_path, prompts, tree_flags):
    """--context-lengths and its options as ContextSettings (None without it); misuse is a usage error."""
    if lengths is None:
        if documents or plot_path:
            raise click.UsageError("--documents and --plot go with --context-lengths.")
        return None
    if prompts:
        raise click.UsageError("--context-lengths builds its prompts from long documents: use --documents, not "
                               "--prompts.")
    if tree_flags["tree"] != "chain" or tree_flags["tree_sweep"]:
        raise click.UsageError("--context-lengths benches chains (the drafting vLLM runs): drop --tree/--tree-sweep.")
    from ..benchmark.context import parse_lengths
    from ..benchmark.settings import ContextSettings

    try:
        parsed = parse_lengths(lengths)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--context-lengths") from error
    return ContextSettings(parsed, documents, per_bucket, plot_path)


def finish(report, data: dict, report_path, human: str, as_json: bool) -> None:
    """Write, print, and exit 3 when a gate failed: the same for every engine."""
    if report_path:
        _write_report(Path(report_path), data)
    click.echo(json.dumps(data, indent=2) if as_json else human)
    for gate in report.gates:
        if not gate.passed:
            click.echo(paragraph(f"error: {gate.message}"), err=True)
    if not report.passed:
        sys.exit(EXIT_GATE)


def _write_report(path: Path, data: dict) -> None:
    """Atomically: a CI step that reads the report never sees half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(json.dumps(data, indent=2) + "\n")
    staging.replace(path)


def engine_line(engine: dict) -> str:
    start = engine.get("start_time_s")
    return (f"engine: {engine['name']} {engine.get('version') or ''} {engine['mode']}, tp={engine.get('tp') or '-'}, "
            f"{engine.get('dtype') or '-'} on {engine.get('device') or '-'}"
            + (f", engine start {start:.1f} s apart from generation {engine['generation_time_s']:.1f} s"
               if start is not None else f", generation {engine['generation_time_s']:.1f} s")
            + (f"; draft {engine['draft']['conversion']}" if (engine.get("draft") or {}).get("conversion") else ""))


def human_report(data: dict) -> str:
    s = data["settings"]
    lines = [f"bench: {s['draft_kind'].upper()} head on {s['target']} — k={s['k']}, {s['dtype']} on {s['device']}, "
             f"temperature {s['temperature']}, chat template {'on' if s['chat_template'] else 'off'}",
             f"{'prompt':<12} {'drafts':>6} {'drafted':>7} {'accepted':>8} {'tau':>6} {'rate':>6} {'tokens':>6} "
             f"{'tok/s':>8} {'base tok/s':>10} {'speedup':>7}"]

    def row(name: str, acc: dict, p: dict) -> str:
        return (f"{name:<12} {acc['drafts']:>6} {acc['drafted']:>7} {acc['accepted']:>8} "
                f"{_fmt(acc['mean_acceptance_length']):>6} {_fmt(acc['acceptance_rate']):>6} "
                f"{p['generated_tokens']:>6} "
                f"{_fmt(p['tokens_per_s'], '.1f'):>8} {_fmt(p['baseline_tokens_per_s'], '.1f'):>10} "
                f"{_fmt(p['speedup'], '.2f'):>7}")

    for p in data["prompts"]:
        lines.append(row(str(p["id"])[:12], p["acceptance"], p))
    overall = data["overall"]
    lines.append(row("overall", overall["acceptance"], overall))
    rates = overall["acceptance"]["per_position_rates"]
    lines.append("per-position acceptance: " + (" ".join(f"{_fmt(r)}" for r in rates) if rates else "-"))
    lines += tree_report_lines(data)
    if s.get("token_map"):
        m = s["token_map"]
        lines.insert(1, f"token map: {m['path']}: the head's LM head restricted to {m['hot_tokens']} of "
                        f"{m['vocab_size']} target tokens")
    if data.get("engine"):
        lines.insert(1, engine_line(data["engine"]))
    ll = data["lossless"]
    lines.append({"exact": "lossless: speculative output identical to plain greedy decoding (fp32)",
                  "first_divergence":
                      f"lossless: {'identical' if ll['identical'] else 'diverged in ' + str(ll['diverged_prompts'])} "
                      "(half precision: near-ties may flip; see first_divergence in --json)",
                  "not_checked": "lossless: not checked (sampling, --no-baseline or a server)"}[ll["mode"]])
    for check in data["gate"]["checks"]:
        lines.append(f"gate {check['name']}: {'passed' if check['passed'] else 'FAILED'}")
    return "\n".join(lines)
