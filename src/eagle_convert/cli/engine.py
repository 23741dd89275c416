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
                  EngineOptions.cli_options("url", "python", "tensor_parallel_size", "args", "concurrency"),
                  BenchSettings.cli_options("compare"), EngineOptions.cli_options("strict")]

    decorators.append(EngineOptions.cli_options("bin"))  # --engine-bin: llama.cpp's tools (check_engine_flags)
    return functools.reduce(lambda f, decorate: decorate(f), reversed(decorators), fn)


def engine_requested(engine: dict) -> bool:
    """True when an engine runs; options that only an engine reads are refused with our runner alone."""
    if engine["engine"] == "ours" and engine["engine_bin"] and not engine["compare"]:
        raise click.UsageError("--engine-bin applies to an engine: add --engine llamacpp.")
    if engine["engine"] != "ours" or engine["engine_url"] is not None or engine["compare"]:
        return True
    given = [flag for flag, value in (("--engine-python", engine["engine_python"]), ("--engine-arg",
             engine["engine_args"]), ("--strict", engine["strict"]), ("--tensor-parallel-size",
             engine["tensor_parallel_size"] != 1), ("--concurrency", engine["concurrency"] != 1)) if value]
    if given:
        raise click.UsageError(f"{', '.join(given)} applies to an engine: add --engine vllm (or --engine-url URL).")
    return False


def check_engine_usage(engine: dict, *, draft: str | None, reference_draft: str | None) -> None:
    check_engine_flags(engine)
    if reference_draft is not None and not engine["compare"]:
        raise click.UsageError("--reference-draft with an engine needs --compare: our runner then benches RAW (the "
                               "head as released) and the engine DRAFT (as converted for it).")
    if engine["engine_url"] is not None and engine["tensor_parallel_size"] != 1:
        raise click.UsageError("--tensor-parallel-size applies to --engine vllm; a server runs with its own.")
    if engine["compare"] and engine["concurrency"] != 1:  # ours decodes alone, where vLLM's batch-wide gate is not
        raise click.UsageError("--compare checks the engine's counters against our runner's, which decodes one request "
                               "at a time: compare at --concurrency 1, then bench the load with --concurrency N.")
    if engine["engine_url"] is None and engine["strict"]:
        raise click.UsageError("--strict applies to --engine-url (other traffic on a shared server).")
    if draft is None and (engine["engine_url"] is None or engine["compare"]):
        raise click.UsageError("--draft is required (except with --engine-url without --compare).")


# The engine options each engine reads (the rest are refused by name): vLLM's are LLM(...) and server options,
# llama.cpp runs its own examples from --engine-bin, OpenVINO GenAI runs in its interpreter with --engine-arg.
ENGINE_FLAGS = {"vllm": ("--engine-url", "--engine-python", "--engine-arg", "--tensor-parallel-size",
                         "--concurrency", "--strict"),
                "llamacpp": ("--engine-bin",),
                "openvino": ("--engine-python", "--engine-arg")}


def check_engine_flags(engine: dict) -> None:
    """Options another engine reads are a usage error, never silently ignored."""
    name = "vllm" if engine["engine"] == "ours" else engine["engine"]  # --compare / --engine-url alone: vLLM
    given = {"--engine-url": engine["engine_url"] is not None, "--engine-python": engine["engine_python"],
             "--engine-arg": engine["engine_args"], "--tensor-parallel-size": engine["tensor_parallel_size"] != 1,
             "--concurrency": engine["concurrency"] != 1, "--strict": engine["strict"],
             "--engine-bin": engine["engine_bin"]}
    foreign = [flag for flag, value in given.items() if value and flag not in ENGINE_FLAGS[name]]
    if foreign:
        takes = ", ".join(ENGINE_FLAGS[name])
        raise click.UsageError(f"{', '.join(foreign)} does not apply to --engine {name} (it takes {takes}).")


def engine_from(parsed: dict, name: str = "vllm") -> EngineOptions:
    """The engine options the library takes (popped from `parsed`); a shared server's other traffic is a warning on
    stderr. `name`: --engine ("ours" with --compare alone means vLLM)."""
    return EngineOptions.from_cli(parsed, warn=lambda message: click.echo(f"warning: {message}", err=True),
                                  name="vllm" if name == "ours" else name)
