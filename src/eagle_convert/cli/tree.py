"""`bench` options for tree drafting, and the lines they add to the human report. Kept apart from cli.py so the
bench command gains them with one decorator."""

from __future__ import annotations

import json

import click

from ..runner.trees.shapes import TreeOptions
from .errors import handle_errors

_OPTIONS = [
    click.option("--tree", "tree", default="chain", show_default=True, metavar="SHAPE",
                 help="chain (k drafts, -k), dynamic (EAGLE-2/3: --tree-depth/--tree-top-k/--tree-tokens), sglang "
                      "(SGLang's default shape for this target), mc_sim_7b_63 (EAGLE-1's static tree), a JSON file "
                      "of rank paths, or vLLM's speculative_token_tree string, e.g. \"[(0,), (1,), (0, 0)]\"."),
    click.option("--tree-depth", type=click.IntRange(0),
                 help="Dynamic: expansion steps (EAGLE's depth; levels = D+1)."),
    click.option("--tree-top-k", type=click.IntRange(1), help="Dynamic: children per expanded node (EAGLE's top_k)."),
    click.option("--tree-tokens", type=click.IntRange(2),
                 help="Dynamic: tokens verified per round, root included (EAGLE's total_token)."),
    click.option("--num-steps", type=click.IntRange(1), help="SGLang --speculative-num-steps (= depth + 1)."),
    click.option("--eagle-topk", type=click.IntRange(1), help="SGLang --speculative-eagle-topk."),
    click.option("--num-draft-tokens", type=click.IntRange(2), help="SGLang --speculative-num-draft-tokens."),
    click.option("--tree-sweep", is_flag=True,
                 help="Bench the chain (-k) and a grid of tree shapes on the first --sweep-prompts prompts; print "
                      "τ, tok/s and speedup per shape, the best one and the SGLang / vLLM flags that serve it."),
    click.option("--sweep-prompts", default=4, show_default=True, type=click.IntRange(1),
                 help="With --tree-sweep: how many prompts each shape runs on."),
]


TREE_FLAGS = ("tree", "tree_depth", "tree_top_k", "tree_tokens", "num_steps", "eagle_topk", "num_draft_tokens",
              "tree_sweep", "sweep_prompts")  # the keyword names the options above give the command


def tree_options(command):
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def tree_options_from(flags: dict) -> TreeOptions:
    return TreeOptions(tree=flags["tree"], depth=flags["tree_depth"], top_k=flags["tree_top_k"],
                       tokens=flags["tree_tokens"], num_steps=flags["num_steps"], eagle_topk=flags["eagle_topk"],
                       num_draft_tokens=flags["num_draft_tokens"])


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
def sweep_command(target: str, draft: str, *, k: int, prompts, num_prompts: int, as_json: bool, **bench_kwargs):
    """--tree-sweep: the grid, as a table (or --json)."""
    from ..benchmark.sweep import run_sweep, sweep_table

    result = run_sweep(target, draft, k=k, prompts=prompts, num_prompts=num_prompts, **bench_kwargs)
    click.echo(json.dumps(result, indent=2) if as_json else sweep_table(result))
