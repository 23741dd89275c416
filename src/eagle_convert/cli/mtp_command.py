"""`convert --mtp TARGET`: parse, call the library's extract_mtp, render. The MTP head is an input kind of its own
(the draft is inside the target), so DRAFT, --target and the options that describe an EAGLE head or its target's
LM head are refused beside --mtp rather than ignored."""

from __future__ import annotations

import json

import click
from click.core import ParameterSource

# convert's options that mean something only for an EAGLE DRAFT + --target conversion.
EAGLE_ONLY = ("draft", "target", "dtype", "fc_bias", "drop", "verifier", "target_pattern", "check_embedding",
              "allow_nonfinite", "target_lm_head", "target_embed", "lm_head_from", "target_gguf")


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


def convert_mtp(target, out, settings, dequantize: bool, as_json: bool, hub) -> None:
    """`settings`: convert's ConvertSettings, of which the MTP extraction takes the output's; `hub`: the target
    repo read at --revision or --target-revision."""
    ctx = click.get_current_context()
    mixed = [p.opts[-1] if p.opts[-1].startswith("-") else p.human_readable_name
             for p in ctx.command.params if p.name in EAGLE_ONLY and _given(ctx, p.name)]
    if mixed:
        raise click.UsageError(f"{', '.join(mixed)} cannot be used with --mtp TARGET, which extracts the MTP head "
                               "inside TARGET (an EAGLE head is converted with DRAFT --target TARGET).")
    from .. import api

    # one MTP layer drafts one token (MiMo, ERNIE: at most)
    k = settings.num_speculative_tokens if _given(ctx, "num_speculative_tokens") else 1
    mtp_settings = api.MtpSettings(to=settings.to or "vllm", dequantize=dequantize, dry_run=settings.dry_run,
                                   force=settings.force, max_shard_size=settings.max_shard_size,
                                   num_speculative_tokens=k, revision=hub.revision or hub.target_revision,
                                   token=hub.token, offline=hub.offline, progress=settings.progress)
    with api.handled_signals():
        result = api.extract_mtp(target, out, mtp_settings)
    for line in result.notes:
        click.echo(f"note: {line}", err=True)
    click.echo(json.dumps(result.to_dict(), indent=2, default=str) if as_json else human(result))


def human(result) -> str:
    layers, plan = result.layers, result.plan_dict()
    lines = [f"target: {result.target.label}: {layers.family.title}, {layers.count} MTP layer(s) "
             f"({layers.count_key}), {len(layers.refs)} tensors, {layers.nbytes:,} bytes in "
             f"{', '.join(layers.files())}",
             f"{'plan' if result.out is None else 'wrote'}: MTP head -> {plan['layout']}"]
    width = max(len(t["name"]) for t in plan["tensors"])
    lines += [f"  {t['name']:<{width}}  {t['dtype']:<14} {str(t['shape']):<14} <- {t['how']}" for t in plan["tensors"]]
    lines += [f"  dropped {name}" for name in plan["dropped"]]
    lines.append(f"tensor bytes to read: target {plan['bytes_to_read']:,}")
    if result.fetch:
        f = result.fetch
        lines.append(f"target {f['repo_id']}@{f['commit_sha'][:12]}: {f['bytes_to_fetch']:,} bytes to fetch "
                     f"(planning fetched {sum(f['fetched_to_plan'].values()):,})")
    if result.out:
        lines.append(f"output: {result.out} ({', '.join(result.files)}); every tensor written and verified")
    lines.append(f"serve: {plan['serve_command']}")
    return "\n".join(lines)
