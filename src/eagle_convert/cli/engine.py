"""bench's engine path on the command line: which options need an engine, and the EngineOptions the library takes
(settings/bench.py declares the options; benchmark/entry.py runs the engine and --compare; cli/bench_command.py
renders the report as for our runner)."""

from __future__ import annotations

import functools

import click

from ..settings.bench import ENGINE, ENGINE_HELP, BenchSettings, EngineOptions
from ..settings.declare import cli_option


def engine_options(fn):
    """--engine, --engine-url, --engine-python, --tensor-parallel-size, --engine-arg, --compare, --strict."""
    decorators = [cli_option(ENGINE, "engine", ENGINE_HELP),
                  EngineOptions.cli_options("url", "python", "tensor_parallel_size", "args"),
                  BenchSettings.cli_options("compare"), EngineOptions.cli_options("strict")]
    return functools.reduce(lambda f, decorate: decorate(f), reversed(decorators), fn)


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


def engine_from(parsed: dict, name: str) -> EngineOptions:
    """The engine options the library takes (popped from `parsed`) for --engine `name` ("ours" with --compare or
    --engine-url: vLLM); a shared server's other traffic is a warning on stderr."""
    return EngineOptions.from_cli(parsed, warn=lambda message: click.echo(f"warning: {message}", err=True),
                                  name="vllm" if name == "ours" else name)
