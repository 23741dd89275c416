"""The engine options of `eagle-convert bench` (--engine, --engine-url, --compare, ...) and the command's engine path:
parsed here into the library's EngineOptions; benchmark/api.py runs the engine (and --compare), cli/bench.py renders the
report as for our runner."""

from __future__ import annotations

import functools

import click

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


def check_engine_usage(engine: dict, *, draft: str | None, reference_draft: str | None) -> None:
    if reference_draft is not None and not engine["compare"]:
        raise click.UsageError("--reference-draft with an engine needs --compare: our runner then benches RAW (the "
                               "head as released) and the engine DRAFT (as converted for it).")
    if engine["engine_url"] is not None and engine["tensor_parallel_size"] != 1:
        raise click.UsageError("--tensor-parallel-size applies to --engine vllm; a server runs with its own.")
    if engine["engine_url"] is None and engine["strict"]:
        raise click.UsageError("--strict applies to --engine-url (other traffic on a shared server).")
    if draft is None and (engine["engine_url"] is None or engine["compare"]):
        raise click.UsageError("--draft is required (except with --engine-url without --compare).")


def engine_from(engine: dict):
    """The engine options the library takes; a shared server's other traffic is a warning on stderr."""
    from ..benchmark.settings import EngineOptions

    return EngineOptions(url=engine["engine_url"], python=engine["engine_python"],
                         tensor_parallel_size=engine["tensor_parallel_size"], args=tuple(engine["engine_args"]),
                         strict=engine["strict"], warn=lambda message: click.echo(f"warning: {message}", err=True))
