"""The `eagle-convert` command: thin click commands over the Python API, and one table turning errors into exit codes
and one-paragraph messages. Results go to stdout (`--json` for machines); notes, warnings and progress to stderr."""

from __future__ import annotations

import gc
import json

import click

from .. import __version__, api
from ..settings.common import HubOptions
from ..settings.convert import ConvertSettings, InspectSettings, TargetTensors
from .exit_codes import handle_errors, paragraph, show_input_warnings
from .position_lines import position_lines


def _api():
    """The Python API with torch under it, loaded by the first call that needs it. Everything imported so far lives
    as long as the process, so it is frozen out of the cycle collector: each full collection would otherwise walk
    torch's objects again (0.2 s here)."""
    api.load()
    gc.freeze()
    return api


def _emit(as_json: bool, payload: dict, human: str) -> None:
    click.echo(json.dumps(payload, indent=2, default=str) if as_json else human)


def _note(lines, prefix: str) -> None:
    for line in lines:
        click.echo(paragraph(f"{prefix}: {line}"), err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="eagle-convert")
def main() -> None:
    """Convert EAGLE draft heads into the layouts serving engines load, and prove they work (bench)."""
    show_input_warnings()


@main.command()
@click.argument("draft", required=False)
@click.option("--target", "-t", help="Target model: folder or org/name repo id (required with DRAFT).")
@click.option("--mtp", metavar="TARGET", help="Instead of DRAFT and --target: extract the MTP (NextN) layers inside "
              "TARGET (folder or repo id) as a draft; --to vllm (default) or sglang. See docs/mtp.md.")
@click.option("--dequantize", is_flag=True, help="With --mtp --to sglang: write a block-FP8 MTP layer as BF16.")
@click.option("--out", "-o", type=click.Path(), help="Output folder (written atomically).")
@ConvertSettings.cli_options()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@TargetTensors.cli_options()
@HubOptions.cli_options(*HubOptions.TWO_REPOS)
@handle_errors
def convert(draft, target, mtp, dequantize, out, as_json, quiet, **parsed):
    """Convert the EAGLE head DRAFT (folder or repo id) for --target into the --to layout; or, with --mtp TARGET,
    extract the MTP layers inside TARGET as a draft."""
    hub = HubOptions.from_cli(parsed)
    settings = ConvertSettings.from_cli(parsed, progress=not quiet, tensors=TargetTensors.from_cli(parsed))
    if not mtp:
        _require_draft_and_target(draft, target, dequantize)
    if not settings.dry_run and not out:
        raise click.UsageError("-o/--out is required (or use --dry-run).")
    if mtp:
        from .mtp_command import convert_mtp

        return convert_mtp(mtp, out, settings, dequantize, as_json, hub)
    # SIGTERM and SIGHUP clean up as Ctrl-C does; the previous handlers are restored after.
    with api.handled_signals():
        try:
            if not settings.dry_run:
                api.start_early_reads(draft, target)  # the disk reads and a core hashes the draft while torch loads
            result = _api().convert(draft, target, out, settings, hub)
        finally:
            api.end_reads()  # convert() did already, unless it never started: nothing may outlive the command
    for line in result.notes:  # e.g. a killed run's staging folder removed: one line each, the path unbroken
        click.echo(f"note: {line}", err=True)
    plan = result.plan
    _note(result.draft.notes + result.target.notes + list(plan.notes), "note")
    _note([f"dropped {n}: {r}" for n, r in plan.dropped], "note")
    _note(plan.warnings, "warning")
    if not as_json:  # --json carries them in `positions`
        _note([f"[{f['name']}] {f['message']} {f['hint']}".strip() for f in result.positions["output_findings"]
               if f["severity"] != "info"], "warning")
    if result.embedding_check and result.embedding_check["equal"] is None:
        _note([result.embedding_check["message"]], "note")
    if result.embedding_check and result.embedding_check["equal"] is False:
        _note([f"the draft's embed_tokens differs from the target's: max |diff| "
               f"{result.embedding_check['max_abs_diff']} over {result.embedding_check['rows_compared']} sampled rows"],
              "warning")
    _note([f"{name} holds {count} NaN/Inf value(s), written as the source holds them (--allow-nonfinite)"
           for name, count in result.nonfinite.items()], "warning")
    if result.fold:
        _note([f"fc bias folded into embed_tokens: worst fc-output error {result.fold.max_abs_error:.3g} "
               f"({result.fold.max_rel_error:.3g} relative) over {result.fold.rows_checked} embedding rows"], "note")
    _emit(as_json, result.to_dict(), _human_convert(result))


def _require_draft_and_target(draft, target, dequantize) -> None:
    """Without --mtp, DRAFT and --target are required (as click itself would say) and --dequantize does not apply."""
    if draft is None:
        raise click.UsageError("Missing argument 'DRAFT'.")
    if target is None:
        raise click.UsageError("Missing option '-t' / '--target'.")
    if dequantize:
        raise click.UsageError("--dequantize applies only with --mtp (an MTP head's FP8 layer written as BF16).")


def _human_convert(result) -> str:
    plan = result.plan
    lines = [f"draft: {result.draft.label} ({result.detected_layout} layout: {result.detected_because})",
             f"{'plan' if result.out is None else 'wrote'}: {plan.spec.kind.upper()} head -> "
             f"{plan.layout} ({plan.dtype_name})"]
    width = max(len(t.name) for t in plan.tensors)
    for t in plan.tensors:
        lines.append(f"  {t.name:<{width}}  {str(t.dtype).removeprefix('torch.'):<8} {str(list(t.shape)):<14} "
                     f"<- {t.describe_source()}")
        if t.derive == api.GATHER:  # a per-rank target: the exact byte range read from each rank file
            lines += [f"      reads {r['file']} bytes [{r['offset']:,}, {r['offset'] + r['bytes']:,}) ({r['name']})"
                      for r in t.reads()]
    read = plan.bytes_read()
    lines.append(f"tensor bytes to read: draft {read['draft']:,}, target {read['target']:,}")
    lines += [f"will check: {check}" for check in result.will_check]
    for role, fetch in (result.fetch or {}).items():
        lines.append(f"{role} {fetch['repo_id']}@{fetch['commit_sha'][:12]}: "
                     f"{fetch['bytes_to_fetch']:,} bytes to fetch "
                     f"(planning fetched {sum(fetch['fetched_to_plan'].values()):,})")
        lines += [f"  {i['what']} {i['file']}: {i['bytes']:,} bytes{' (cached)' if i['cached'] else ''}"
                  for i in fetch["to_fetch"]]
    if result.token_map:
        m = result.token_map
        lines.append(f"token map: {m['source']}: {m['hot_tokens']} hot target ids, checked against the target's "
                     f"vocabulary ({m['target_vocab_size']}); {'written' if result.out else 'to be written'} to "
                     f"OUT/{m['file']} in SGLang's format")
    if result.out:
        lines.append(f"output: {result.out} ({', '.join(result.files)}); every tensor reloaded and verified")
    written = result.positions["written"]
    rope = "rope_theta, rope_scaling and rope_parameters (one schedule for every engine)" \
        if plan.gguf_file is None else written["why"]
    lines.append(f"positions: max_position_embeddings {written.get('max_position_embeddings')}; RoPE written as "
                 f"{rope}")
    lines.append(f"serve: {plan.serve_command}")
    return "\n".join(lines)


@main.command()
@click.argument("path")
@click.option("--target", "-t", help="Also check the head against this target.")
@InspectSettings.cli_options()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
@HubOptions.cli_options(*HubOptions.TWO_REPOS)
@handle_errors
def inspect(path, target, as_json, **parsed):
    """Show PATH's layout and why, its config, tensors, and the problems a conversion would fix. PATH may also be a
    target saved per rank: its format, ranks, padding and which files hold the LM head."""
    report = _api().inspect(path, target, InspectSettings.from_cli(parsed), HubOptions.from_cli(parsed))
    _emit(as_json, report.to_dict(), _human_inspect(report))


def _human_inspect(report) -> str:
    config_dtype = api.config_dtype  # torch is loaded by now: inspect ran
    cfg = report.config
    if report.target and isinstance(cfg.get("text_config"), dict):  # a multimodal target's sizes are its text model's
        cfg = {**cfg, **cfg["text_config"]}
    lines = [f"{report.path}: {report.layout or 'unrecognised'} layout"
             + (f" ({report.layout_reason})" if report.layout_reason else ""),
             f"kind: {report.kind or '?'}; hidden {cfg.get('hidden_size')}, vocab {cfg.get('vocab_size')}, "
             f"max positions {cfg.get('max_position_embeddings')}, torch_dtype {config_dtype(cfg)}",
             "tensors:"]
    width = max((len(t["name"]) for t in report.tensors), default=0)
    lines += [f"  {t['name']:<{width}}  {t['dtype']:<5} {str(t['shape']):<14} {t['file']}" for t in report.tensors]
    if report.ranks:
        lines += _human_ranks(report.ranks)
    if report.family:
        f = report.family
        lines.append(f"family: {f['family']}, {f['title']}; loaded as it is by {', '.join(f['engines'])}; "
                     + (f"eagle-convert: {f['how']}" if f["converted"] else "eagle-convert does not convert it"))
    if report.variant:
        lines.append(f"variant: {report.variant}")
        lines += [f"  {k} = {json.dumps(f['value'])}  ({f['source']})" for k, f in report.flags.items()]
    if report.taps:
        lines.append(f"target layers feeding the head: {report.taps['line']}")
    if report.target:
        lines += _human_target(report.target)
    if report.mtp:
        lines += _human_mtp_draft(report.mtp)
    lines += [f"note: {n}" for n in report.notes]
    lines.append("problems:" if report.problems else "problems: none found")
    lines += [f"  - {p.what}\n    fix: {p.fix}" for p in report.problems]
    lines += position_lines(report.positions)
    return "\n".join(lines)


def _human_target(t: dict) -> list[str]:
    lines = [f"target family: {t['family'] or 'unknown'}" + (" (multimodal)" if t["multimodal"] else "")
             + (f"; sizes from {t['sizes_in']}" if t.get("sizes_in") else "")
             + (f"; RoPE {t['rope']}" if t["rope"] else ""),
             f"quantization: {t['quantization'] or 'none declared'}"]
    for which in ("lm_head", "embedding"):
        if which in t:
            e = t[which]
            where = f" in {e['file']}" if e["file"] else ""
            lines.append(f"{which.replace('_', ' ')}: {e['name']}{where}: {e['stored']}"
                         + (" (tied to the embedding)" if e.get("tied") else ""))
    if t.get("found_by"):
        lines.append(f"found by: {t['found_by']}")
    lines.append(_human_mtp(t["mtp"]))
    lines.append(f"bench runner: {t['bench']}")
    return lines


def _human_mtp(m: dict) -> str:
    if not m["found"]:
        return f"mtp layers: none ({m['why']})"
    dtypes = ", ".join(f"{n} {d}" for d, n in m["dtypes"].items())
    return (f"mtp layers: {m['layers']} ({m['title']}, {m['count_key']}), {m['tensors']} tensors ({dtypes}), "
            f"{m['bytes']:,} bytes in {', '.join(m['files'])}; fusion input {m['concat']}"
            + (f"; carries {', '.join(m['copies'])}" if m["copies"] else "")
            + "".join(f"; note: {n}" for n in m["notes"]) + " (convert --mtp extracts them)")


def _human_mtp_draft(m: dict) -> list[str]:
    """An MTP draft folder (inspection/mtp.py): its layers, how it is served, where it came from."""
    p, serve = m["provenance"], m["serve"]
    lines = [f"mtp draft: {m['layers']} layer(s) of {m['title']} ({m['count_key']}), {m['tensors']} tensors; "
             f"fusion input {m['concat']}" if "layers" in m else "mtp draft: layers not complete (see problems)",
             f"served by: {serve['engine']}, method {serve['method']}"
             + (f", speculative config {json.dumps(serve['speculative_config'])}" if "speculative_config" in serve
                else ""),
             f"serve: {serve['command']}",
             f"provenance: {p['tool']} {p['version']}, {p['layout']}, from {p['target']}"
             + (f" @ {p['commit_sha']}" if p.get("commit_sha") else "") if p else "provenance: none recorded",
             f"bench runner: {m['bench']}"]
    return lines


def _human_ranks(ranks: dict) -> list[str]:
    lines = [f"per-rank target: {ranks['title']}; tp {ranks['tp']}, pp {ranks['pp']}, {ranks['parts_per_rank']} "
             f"part(s) per rank ({ranks['pattern']}); vocab {ranks['vocab_size']} padded to {ranks['padded_vocab']}, "
             f"hidden {ranks['hidden_size']}, stored as {ranks['dtype']}"]
    for hf_name, t in ranks["tensors"].items():
        lines.append(f"  {hf_name} {t['shape']} <- {t['how']} of {t['from']}:")
        lines += [f"      {r['file']} {r['shape']} bytes [{r['offset']:,}, {r['offset'] + r['bytes']:,})"
                  for r in t["reads"]]
    return lines


@main.command()
def layouts():
    """List the layouts eagle-convert reads and writes."""
    for layout in api.layouts():
        io = ("read" if layout.readable else "") + ("/write" if layout.writable else "")
        click.echo(f"{layout.name:<12} {io.strip('/'):<10} {', '.join(layout.kinds):<14} {layout.summary}")
        if layout.note:
            click.echo(f"{'':<12} note: {layout.note}")


@main.command()
@click.option("--workdir", type=click.Path(), help="Keep the example files here (default: a temporary folder).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary on stdout.")
@handle_errors
def demo(workdir, as_json):
    """Build a tiny target and EAGLE-1 head offline, then inspect, convert, verify and bench them."""
    from .demo_command import run_demo

    summary = run_demo(workdir, echo=None if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))


from .bench_command import bench  # noqa: E402  (lives beside the runner; registered here)

main.add_command(bench)

from .vocab_command import vocab_map  # noqa: E402  (the vocab-map group: build, convert, check)

main.add_command(vocab_map)
