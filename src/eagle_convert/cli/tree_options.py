"""`bench` options for tree drafting (declared by settings/bench.TreeSettings), the lines they add to the human
report, and --tree-sweep."""

from __future__ import annotations

import json

import click

from ..settings.bench import TreeSettings
from .exit_codes import handle_errors

tree_options = TreeSettings.cli_options()


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def tree_report_lines(data: dict) -> list[str]:
    """What a tree run adds to the human report: its shape, how deep rounds got, and the calibration check."""
    tree = data["settings"].get("tree") or {}
    if tree.get("mode", "chain") == "chain":
        return []
    acceptance = data["overall"]["acceptance"]
    shape = (f"depth {tree['depth']}, top-k {tree['top_k']}, {tree['tokens']} tokens" if tree["mode"] == "dynamic"
             else f"{tree['source']}")
    extra = acceptance.get("tree") or {}
    return [f"tree: {tree['mode']} ({shape}): {tree['nodes']} nodes verified per round, up to {tree['levels']} "
            f"accepted; predicted τ {_fmt(extra.get('predicted_mean_acceptance_length'))} (if the head were "
            "calibrated)",
            "accepted-length histogram (a = 0..): " + " ".join(map(str, acceptance["histogram"])),
            "(per-position acceptance above = fraction of rounds whose accepted path reached depth 1, 2, ...; "
            "rate = accepted / nodes verified)"]


@handle_errors
def sweep_command(target: str, draft: str, **keywords):
    """--tree-sweep: the grid, as a table (or --json)."""
    from .. import api

    as_json = click.get_current_context().params["as_json"]
    result = api.tree_sweep(target, draft, **keywords)
    click.echo(json.dumps(result, indent=2) if as_json else api.sweep_table(result))
