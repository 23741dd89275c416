"""How every command turns errors into exit codes and one-paragraph messages (every command of cli/)."""

from __future__ import annotations

import functools
import json
import os
import sys
import textwrap
import warnings

import click

from .. import api
from ..errors import EagleConvertError, InputWarning, options_spelled_for_cli

EXIT_ERROR, EXIT_GATE = 1, 3  # 2, a usage error, is click's own exit code


def paragraph(text: str) -> str:
    """One paragraph of about 100 columns that starts with its label ("error: ...") and breaks only at spaces: a
    path, flag or name with a hyphen in it (`tensor-parallel`, `/tmp/eagle-convert-x`) stays whole, so it can be
    copied and searched for, and where lines break never depends on how long a path is."""
    label, _, rest = " ".join(text.split()).partition(" ")
    return textwrap.fill(rest, width=100, initial_indent=f"{label} ", break_on_hyphens=False, break_long_words=False)


def show_input_warnings() -> None:
    """The library's InputWarnings as `warning:` paragraphs on stderr, as they come; other warnings as Python shows
    them. Once per process (each command's group callback calls it)."""
    if getattr(warnings.showwarning, "shows_input_warnings", False):
        return
    python_way = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, InputWarning):
            click.echo(paragraph(f"warning: {message}"), err=True)
        else:
            python_way(message, category, filename, lineno, file, line)

    show.shows_input_warnings = True
    warnings.showwarning = show


def handle_errors(fn):
    """Typed library errors -> one paragraph on stderr and exit 1; tracebacks only with EAGLE_CONVERT_DEBUG=1. Every
    text the command prints names options as flags (`--force`, not the Python API's `force=True`: errors.option).
    With the command's --json, the error is also a JSON object on stdout (read from the command line as parsed, so
    any function of the command may be wrapped)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        api.forget_outputs()
        with options_spelled_for_cli():
            return _run(fn, args, kwargs)

    return wrapper


def _run(fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    except EagleConvertError as exc:
        if os.environ.get("EAGLE_CONVERT_DEBUG") == "1":
            raise
        _fail(f"error: {exc.message} {exc.hint}", type(exc).__name__)
    except OSError as exc:  # disk full, permission denied...: not our typed errors, still one paragraph
        if os.environ.get("EAGLE_CONVERT_DEBUG") == "1":
            raise
        _fail(f"error: {exc}. Nothing was written; fix the cause (free space, permissions) and retry.",
              type(exc).__name__)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP turned into Interrupted (interrupts.py)
        click.echo(api.interrupted_line(getattr(exc, "signal_name", None)), err=True)
        sys.exit(getattr(exc, "exit_code", 130))


def _as_json() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.params.get("as_json"))


def _fail(message: str, kind: str) -> None:
    if _as_json():
        click.echo(json.dumps({"ok": False, "error": kind, "message": message.removeprefix("error: ")}))
    click.echo(paragraph(message), err=True)
    sys.exit(EXIT_ERROR)
