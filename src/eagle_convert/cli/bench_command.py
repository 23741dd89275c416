"""The `eagle-convert bench` command: a thin shell over `eagle_convert.bench`, plus the CI gate (exit code 3)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .. import api
from ..settings.bench import BenchSettings, ContextSettings, DecodeSettings, GateOptions, TreeSettings
from ..settings.common import HubOptions
from .context_table import context_report
from .engine import check_engine_usage, engine_from, engine_options, engine_requested
from .exit_codes import EXIT_GATE, handle_errors, paragraph
from .tree_options import sweep_command, tree_options, tree_report_lines


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


@click.command()
@click.option("--target", "-t", required=True, help="Target model folder (the whole model runs).")
@click.option("--draft", "-d", help="Draft head: any layout convert reads or writes (folder or repo id). Required "
                                    "except with --engine-url (the server has its head).")
@click.option("--mtp-from-target", is_flag=True,
              help="Bench the MTP layer the target ships, loaded from TARGET itself (instead of --draft; the same "
                   "as --draft TARGET). An extracted MTP folder is a --draft like any other.")
@DecodeSettings.cli_options("k", "max_new_tokens", "prompts", "temperature", "seed")
@BenchSettings.cli_options("device", "dtype")
@DecodeSettings.cli_options("chat_template", "ignore_eos")
@BenchSettings.cli_options("baseline")
@GateOptions.cli_options()
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Also write the full --json report to this file (written when a gate fails too).")
@click.option("--threads", type=click.IntRange(1), help="torch CPU threads (default: torch's choice).")
@BenchSettings.cli_options("drop", "max_model_len", "allow_rope_mismatch")
@DecodeSettings.cli_options("token_map")
@ContextSettings.cli_options()
@click.option("--json", "as_json", is_flag=True, help="The full report (documented schema) on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr (shown with --json too: stdout stays the "
                                                    "report).")
@tree_options
@engine_options
@HubOptions.cli_options(*HubOptions.DRAFT_REPO)
def bench(target, draft, mtp_from_target, report_path, threads, as_json, quiet, **parsed):
    """Run TARGET with the DRAFT head (speculative decoding) and report acceptance, speed and losslessness."""
    tree = TreeSettings.from_cli(parsed)
    context = _context_settings(parsed, tree)
    if mtp_from_target:
        if draft is not None:
            raise click.UsageError("--mtp-from-target and --draft name two drafts: pass one of them.")
        draft = target  # a draft that is the target: its own MTP layer (mtp/draft.py)
    with_engine = engine_requested(parsed)
    if with_engine:
        if not tree.is_chain:
            raise click.UsageError("--tree and --tree-sweep apply to our runner: an engine bench drafts chains "
                                   "(bench the tree without --engine / --engine-url / --compare).")
        check_engine_usage(parsed, draft=draft, reference_draft=parsed["reference_draft"])
        if parsed["token_map"]:
            raise click.UsageError("--token-map restricts the head in our runner; vLLM has no hot-token map, so an "
                                   "engine bench would ignore it (bench the map without --engine / --engine-url / "
                                   "--compare).")
    elif draft is None:
        raise click.UsageError("--draft is required (except with --engine-url).")

    if threads and (not with_engine or parsed["compare"]):  # our runner's torch (an engine has its own)
        import torch

        torch.set_num_threads(threads)

    engine_name = parsed.pop("engine")
    engine = engine_from(parsed, engine_name) if with_engine else None
    hub = HubOptions.from_cli(parsed)
    decode = DecodeSettings.from_cli(parsed, tree=None if with_engine else tree.options())
    settings = BenchSettings.from_cli(parsed, decode=decode, gates=GateOptions.from_cli(parsed), engine=engine,
                                      progress=not quiet, context=context)
    if tree.tree_sweep:  # a bad --token-map is one paragraph here too
        return sweep_command(target, draft, num_prompts=tree.sweep_prompts, **_sweep_keywords(settings, hub))

    # SIGTERM and SIGHUP end a bench (and its engine processes, in sessions of their own) as Ctrl-C does; prompts and
    # documents are tokenized inside immediate() (session.py, context.py), before any engine starts
    with api.handled_signals():
        report = handle_errors(api.bench)(target, draft, settings, hub)
    data = report.to_dict()
    for finding in (data.get("positions") or {}).get("findings", []):
        if finding["severity"] != "info" and not as_json:  # --json carries them in `positions`
            click.echo(paragraph(f"warning: [{finding['name']}] {finding['message']} {finding['hint']}"), err=True)
    table = api.compare_table(data["compare"]["rows"], engine.label) if report.compare is not None else None
    human = context_report(data) if context is not None else human_report(data)
    finish(report, data, report_path, "\n".join(filter(None, [human, table])), as_json)


def _sweep_keywords(settings: BenchSettings, hub: HubOptions) -> dict:
    """--tree-sweep benches each shape through the keyword form (benchmark/sweep.py): the settings it takes."""
    d = settings.decode
    return dict(k=d.k, prompts=d.prompts, max_new_tokens=d.max_new_tokens, temperature=d.temperature, seed=d.seed,
                device=settings.device, dtype=settings.dtype, chat_template=d.chat_template, drop=settings.drop,
                ignore_eos=d.ignore_eos, token_map=d.token_map, progress=settings.progress, revision=hub.revision,
                token=hub.token, offline=hub.offline)


def _context_settings(parsed: dict, tree: TreeSettings) -> ContextSettings | None:
    """--context-lengths and its options as ContextSettings (None without it); misuse is a usage error."""
    lengths = parsed.pop("context_lengths")
    if lengths is None:
        if parsed["documents"] or parsed["plot_path"]:
            raise click.UsageError("--documents and --plot go with --context-lengths.")
        ContextSettings.from_cli(parsed)  # its options, unused, taken off the command line
        return None
    if parsed["prompts"]:
        raise click.UsageError("--context-lengths builds its prompts from long documents: use --documents, not "
                               "--prompts.")
    if not tree.is_chain:
        raise click.UsageError("--context-lengths benches chains (the drafting vLLM runs): drop --tree/--tree-sweep.")
    try:
        parsed_lengths = api.parse_lengths(lengths)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--context-lengths") from error
    return ContextSettings.from_cli(parsed, lengths=parsed_lengths)


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
