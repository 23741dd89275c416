"""The `eagle-convert` command: thin click commands over the Python API, and one table turning errors into exit codes
and one-paragraph messages. Results go to stdout (`--json` for machines); notes, warnings and progress to stderr."""

from __future__ import annotations

import gc
import json

import click

from .. import __version__
from ..kinds import EAGLE1
from ..layouts import LAYOUTS, output_layouts
from ..layouts.registry import DEFAULT_OUTPUT_LAYOUTS, default_layouts_said, draft_layouts
from ..spec import FC_BIAS_MODES
from .errors import handle_errors, paragraph, show_input_warnings
from .positions import allow_rope_mismatch_option, max_model_len_option, position_lines

# The EAGLE-1 default's note (which vLLM refuses it) is said in --to's help.
EAGLE1_DEFAULT = LAYOUTS[DEFAULT_OUTPUT_LAYOUTS[EAGLE1]]

def _size(value: str) -> int:
    from ..io.units import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-shard-size") from exc


def _api():
    """The Python API, and torch under it. Everything imported so far lives as long as the process, so it is frozen
    out of the cycle collector: each full collection would otherwise walk torch's objects again (0.2 s here)."""
    from .. import api

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


def hub_options(fn):
    for option in reversed([
        click.option("--revision", help="Draft repo revision (branch, tag or commit sha)."),
        click.option("--target-revision", help="Target repo revision."),
        click.option("--token", envvar="HF_TOKEN", help="Hugging Face token (default: $HF_TOKEN)."),
        click.option("--offline", is_flag=True, default=None, help="Use only the local cache (also HF_HUB_OFFLINE=1)."),
    ]):
        fn = option(fn)
    return fn


def target_tensor_options(fn):
    """Where the target's LM head and embedding are, when its family's table does not say (targets/)."""
    for option in reversed([
        click.option("--target-lm-head", metavar="NAME", help="The target's LM head tensor, for an architecture "
                     "eagle-convert does not know (e.g. language_model.lm_head.weight)."),
        click.option("--target-embed", metavar="NAME", help="The target's input embedding tensor (e.g. "
                     "language_model.model.embed_tokens.weight)."),
        click.option("--lm-head-from", metavar="CHECKPOINT", help="Read the target's LM head and embedding from "
                     "this checkpoint (folder or repo id): the unquantized base of a quantized target."),
    ]):
        fn = option(fn)
    return fn


@main.command()
@click.argument("draft", required=False)
@click.option("--target", "-t", help="Target model: folder or org/name repo id (required with DRAFT).")
@click.option("--mtp", metavar="TARGET", help="Instead of DRAFT and --target: extract the MTP (NextN) layers inside "
              "TARGET (folder or repo id) as a draft; --to vllm (default) or sglang. See docs/mtp.md.")
@click.option("--dequantize", is_flag=True, help="With --mtp --to sglang: write a block-FP8 MTP layer as BF16.")
@click.option("--out", "-o", type=click.Path(), help="Output folder (written atomically).")
@click.option("--to", "to", type=click.Choice(output_layouts()), default=None,
              help="Output layout (see `eagle-convert layouts`) [default by the head's kind: "
              f"{default_layouts_said()}; vllm with --mtp]. {EAGLE1_DEFAULT.note}.")
@click.option("--dtype", type=click.Choice(["auto", "bfloat16", "float16", "float32"]), default="auto",
              show_default=True, help="Output float dtype; auto = the target's torch_dtype.")
@click.option("--fc-bias", type=click.Choice(FC_BIAS_MODES), default="error", show_default=True,
              help="What to do with an fc bias the output layout cannot hold (vLLM V1).")
@click.option("--drop", multiple=True, metavar="PATTERN", help="Drop draft tensors matching this glob (repeatable).")
@click.option("--verifier", help="speculators: the verifier's name or path (default: the target as given).")
@click.option("-k", "--num-speculative-tokens", default=3, show_default=True, help="k in the printed serve command.")
@click.option("--max-shard-size", default="5GB", show_default=True, callback=lambda ctx, p, v: _size(v),
              help="Shard the output above this size (5GB, 500MB, bytes).")
@click.option("--target-pattern", metavar="PATTERN",
              help="A target saved per rank with a custom vLLM --file-pattern, e.g. 'w-{rank}-{part}.safetensors'.")
@click.option("--check-embedding", is_flag=True,
              help="Compare the draft's embedding copy with the target's even when that reads another target shard.")
@click.option("--allow-nonfinite", is_flag=True, help="Write NaN/Inf values that the source tensors hold (refused by "
              "default); the provenance records which tensors hold how many.")
@max_model_len_option()
@allow_rope_mismatch_option
@click.option("--token-map", type=click.Path(exists=True, dir_okay=False),
              help="--to sglang, EAGLE-1: a hot-token map (FR-Spec; any vocab-map format), checked against the target, "
                   "copied into OUT in SGLang's format and named in the serve command (--speculative-token-map).")
@click.option("--dry-run", is_flag=True, help="Print the plan and the bytes it will read; write nothing.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@target_tensor_options
@hub_options
@handle_errors
def convert(draft, target, mtp, dequantize, out, to, dtype, fc_bias, drop, verifier, num_speculative_tokens,
            max_shard_size, target_pattern, check_embedding, allow_nonfinite, max_model_len,
            allow_rope_mismatch, token_map, dry_run, force, as_json, quiet, revision,
            target_revision, token, offline, target_lm_head, target_embed, lm_head_from):
    """Convert the EAGLE head DRAFT (folder or repo id) for --target into the --to layout; or, with --mtp TARGET,
    extract the MTP layers inside TARGET as a draft."""
    if not mtp:
        _require_draft_and_target(draft, target, dequantize)
    if not dry_run and not out:
        raise click.UsageError("-o/--out is required (or use --dry-run).")
    if mtp:
        from .mtp import convert_mtp

        return convert_mtp(mtp, out, to, dequantize, num_speculative_tokens, max_shard_size, dry_run, force, as_json,
                           quiet, revision or target_revision, token, offline)
    from ..io.background import end_reads
    from ..io.interrupts import handled_signals

    # SIGTERM and SIGHUP clean up as Ctrl-C does; the previous handlers are restored after.
    with handled_signals():
        try:
            if not dry_run:
                from ..conversion.prefetch import start_early_reads

                start_early_reads(draft, target)  # the disk reads and a core hashes the draft while torch loads
            run = _api().convert
            result = run(draft, target, out, to=to, dtype=dtype, dry_run=dry_run, force=force, drop=drop,
                         max_shard_size=max_shard_size, fc_bias=fc_bias, verifier=verifier,
                         num_speculative_tokens=num_speculative_tokens, revision=revision,
                         target_revision=target_revision, token=token, offline=offline,
                         progress=not quiet, check_embedding=check_embedding,
                         target_pattern=target_pattern, target_lm_head=target_lm_head, target_embed=target_embed,
                         lm_head_from=lm_head_from, allow_nonfinite=allow_nonfinite, max_model_len=max_model_len,
                         allow_rope_mismatch=allow_rope_mismatch, token_map=token_map)
        finally:
            end_reads()  # convert() did already, unless it never started: nothing may outlive the command
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
    from ..conversion.plan import GATHER

    plan = result.plan
    lines = [f"draft: {result.draft.label} ({result.detected_layout} layout: {result.detected_because})",
             f"{'plan' if result.out is None else 'wrote'}: {plan.spec.kind.upper()} head -> "
             f"{plan.layout} ({plan.dtype_name})"]
    width = max(len(t.name) for t in plan.tensors)
    for t in plan.tensors:
        lines.append(f"  {t.name:<{width}}  {str(t.dtype).removeprefix('torch.'):<8} {str(list(t.shape)):<14} "
                     f"<- {t.describe_source()}")
        if t.derive == GATHER:  # a per-rank target: the exact byte range read from each rank file
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
    lines.append(f"positions: max_position_embeddings {written.get('max_position_embeddings')}; RoPE written as "
                 "rope_theta, rope_scaling and rope_parameters (one schedule for every engine)")
    lines.append(f"serve: {plan.serve_command}")
    return "\n".join(lines)


@main.command()
@click.argument("path")
@click.option("--target", "-t", help="Also check the head against this target.")
@click.option("--drop", multiple=True, metavar="PATTERN", help="Ignore draft tensors matching this glob.")
@click.option("--target-pattern", metavar="PATTERN", help="A target saved per rank with a custom vLLM --file-pattern.")
@max_model_len_option()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
@hub_options
@handle_errors
def inspect(path, target, drop, target_pattern, max_model_len, as_json, revision, target_revision, token, offline):
    """Show PATH's layout and why, its config, tensors, and the problems a conversion would fix. PATH may also be a
    target saved per rank: its format, ranks, padding and which files hold the LM head."""
    run = _api().inspect

    report = run(path, target, drop=drop, revision=revision, target_revision=target_revision, token=token,
                 offline=offline, target_pattern=target_pattern, max_model_len=max_model_len)
    _emit(as_json, report.to_dict(), _human_inspect(report))


def _human_inspect(report) -> str:
    from ..checkpoint.index import config_dtype  # torch is loaded by now: inspect ran

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
    if report.variant:
        lines.append(f"variant: {report.variant}")
        lines += [f"  {k} = {json.dumps(f['value'])}  ({f['source']})" for k, f in report.flags.items()]
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
    for layout in draft_layouts().values():
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
    from .demo import run_demo

    summary = run_demo(workdir, echo=None if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))


from .bench import bench  # noqa: E402  (lives beside the runner; registered here)

main.add_command(bench)

from .vocab import vocab_map  # noqa: E402  (the vocab-map group: build, convert, check)

main.add_command(vocab_map)
