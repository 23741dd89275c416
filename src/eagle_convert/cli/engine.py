"""The engine options of `eagle-convert bench` (--engine, --engine-url, --compare, ...) and the command's engine path:
thin, over engines/api.py and engines/compare.py. runner/cli.py prints and gates the report as for our runner."""

from __future__ import annotations

import functools
import sys

import click

from .errors import handle_errors

ENGINES = ("ours", "vllm")


def engine_options(fn):
    options = [
        click.option("--engine", type=click.Choice(ENGINES), default="ours", show_default=True,
                     help="Who decodes: our bundled runner, or vLLM's offline engine (in its own interpreter)."),
        click.option("--engine-url", metavar="URL",
                     help="Bench an OpenAI-compatible vLLM server that already serves TARGET with the head "
                          "(counters from its /metrics)."),
        click.option("--engine-python", metavar="PATH", type=click.Path(dir_okay=False),
                     help="The interpreter that has vllm (default: this one if it can import vllm, else "
                          "$EAGLE_CONVERT_VLLM_PYTHON)."),
        click.option("--tensor-parallel-size", type=click.IntRange(1), default=1, show_default=True,
                     help="vLLM's tensor_parallel_size (--engine vllm)."),
        click.option("--engine-arg", "engine_args", multiple=True, metavar="KEY=VALUE",
                     help="Passed to vllm.LLM(...) (repeatable; VALUE read as JSON when it parses)."),
        click.option("--compare", is_flag=True,
                     help="Run our runner and the engine on the same prompts: a side-by-side table, exit 3 when "
                          "fp32 greedy counters or tokens differ."),
        click.option("--strict", is_flag=True,
                     help="With --engine-url: fail (instead of warning) when other traffic moved the counters."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), fn)


def engine_requested(engine: dict) -> bool:
    """True when an engine runs; options that only an engine reads are refused with our runner alone."""
    if engine["engine"] != "ours" or engine["engine_url"] is not None or engine["compare"]:
        return True
    given = [flag for flag, value in (("--engine-python", engine["engine_python"]), ("--engine-arg",
             engine["engine_args"]), ("--strict", engine["strict"]), ("--tensor-parallel-size",
             engine["tensor_parallel_size"] != 1)) if value]
    if given:
        raise click.UsageError(f"{', '.join(given)} applies to an engine: add --engine vllm (or --engine-url URL).")
    return False


def _check_usage(engine: dict, opts: dict) -> None:
    if opts["reference_draft"] is not None and not engine["compare"]:
        raise click.UsageError("--reference-draft with an engine needs --compare: our runner then benches RAW (the "
                               "head as released) and the engine DRAFT (as converted for it).")
    if engine["engine_url"] is not None and engine["tensor_parallel_size"] != 1:
        raise click.UsageError("--tensor-parallel-size applies to --engine vllm; a server runs with its own.")
    if engine["engine_url"] is None and engine["strict"]:
        raise click.UsageError("--strict applies to --engine-url (other traffic on a shared server).")
    if opts["draft"] is None and (engine["engine_url"] is None or engine["compare"]):
        raise click.UsageError("--draft is required (except with --engine-url without --compare).")


def engine_bench(engine: dict, opts: dict):
    """(report, report dict, compare table or None)."""
    from ..api import bench as bench_ours
    from ..benchmark.engine_bench import bench_engine
    from ..benchmark.compare import compare_gate, compare_table
    from ..benchmark.settings import DecodeSettings, EngineOptions, GateOptions

    _check_usage(engine, opts)
    name = "vLLM server" if engine["engine_url"] else "vLLM"
    progress = not opts["quiet"] and not opts["as_json"] and sys.stderr.isatty()
    shared = dict(k=opts["k"], max_new_tokens=opts["max_new_tokens"], prompts=opts["prompts"],
                  temperature=opts["temperature"], seed=opts["seed"], dtype=opts["dtype"],
                  chat_template=opts["chat_template"], progress=progress, drop=opts["drop"],
                  ignore_eos=opts["ignore_eos"])

    @handle_errors
    def go(as_json=opts["as_json"]):
        ours = None
        if engine["compare"]:  # ours first: quick, and our own errors surface before an engine start
            if opts["threads"]:
                import torch

                torch.set_num_threads(opts["threads"])
            # --reference-draft RAW: ours runs the head as released, the engine the conversion (who is at fault?)
            ours = bench_ours(opts["target"], opts["reference_draft"] or opts["draft"], device=opts["device"],
                              baseline=False, **shared)
        decode = DecodeSettings(k=opts["k"], max_new_tokens=opts["max_new_tokens"], temperature=opts["temperature"],
                                seed=opts["seed"], ignore_eos=opts["ignore_eos"], chat_template=opts["chat_template"],
                                prompts=opts["prompts"])
        options = EngineOptions(url=engine["engine_url"], python=engine["engine_python"],
                                tensor_parallel_size=engine["tensor_parallel_size"], args=tuple(engine["engine_args"]),
                                strict=engine["strict"], warn=lambda m: click.echo(f"warning: {m}", err=True))
        gates = GateOptions(opts["min_acceptance_length"], None, opts["reference_report"], opts["max_tau_drop"])
        report = bench_engine(opts["target"], opts["draft"], decode, options, dtype=opts["dtype"],
                              baseline=not opts["no_baseline"], progress=progress, drop=opts["drop"], gates=gates)
        return ours, report

    ours, report = go(as_json=opts["as_json"])  # handle_errors reads as_json from the keywords
    data = report.to_dict()
    data["gate"]["min_acceptance_length"] = opts["min_acceptance_length"]
    table = None
    if ours is not None:
        ours_data = ours.to_dict()
        gate, rows = compare_gate(ours_data, data, name)
        report.gates.append(gate)
        data["gate"] = {**data["gate"], "passed": report.passed, "checks": [g.to_dict() for g in report.gates]}
        data["compare"] = {"ours": {"settings": ours_data["settings"], "overall": ours_data["overall"]},
                           "rows": rows}
        table = compare_table(rows, name)
    return report, data, table
