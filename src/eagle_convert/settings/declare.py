"""One declaration per command-line option: a dataclass field says its flags, type and default once (a `Flag`), and
what it means for that setting (its help). `cli_options(*names)` turns the fields into click options, in the order
asked (a command interleaves several settings' options, and its --help keeps that order); `from_cli(parsed)` builds
the settings object from click's parsed keywords, taking only its own."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import click


@dataclass(frozen=True)
class Flag:
    """An option's spelling and type, shared by every setting that takes it: `flags` as click takes them, `param`
    the keyword click parses it into (None: the field's name), `to_value` the parsed value into the setting's, and
    click's other keywords (type, default, multiple, is_flag, metavar, ...)."""
    flags: tuple[str, ...]
    param: str | None = None
    to_value: Callable[[Any], Any] | None = None
    click: dict = field(default_factory=dict)


def flag(*flags: str, param: str | None = None, to_value=None, **click_keywords) -> Flag:
    return Flag(flags, param, to_value, click_keywords)


def setting(default: Any, declared: Flag | None = None, *, help: str | None = None) -> Any:
    """A settings field: its Python default, and (`declared`) the option that sets it on the command line."""
    metadata = {"flag": declared, "help": help} if declared is not None else {}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _declared(cls) -> dict[str, Any]:
    return {f.name: f for f in fields(cls) if f.metadata.get("flag") is not None}


def _param(f) -> str:
    return f.metadata["flag"].param or f.name


class Declared:
    """Mixin of a frozen dataclass whose fields declare their options."""

    @classmethod
    def cli_options(cls, *names: str):
        """A decorator adding the options of `names` (default: every declared field, in field order)."""
        declared = _declared(cls)
        chosen = [declared[n] for n in names] if names else list(declared.values())
        options = [click.option(*f.metadata["flag"].flags, _param(f), help=f.metadata["help"],
                                **f.metadata["flag"].click) for f in chosen]
        return lambda command: functools.reduce(lambda fn, option: option(fn), reversed(options), command)

    @classmethod
    def from_cli(cls, parsed: dict, **given):
        """The settings from click's parsed keywords (its own are popped from `parsed`, so that what is left over
        is visibly someone else's); `given`: fields the command sets itself (e.g. progress from --quiet)."""
        values = {}
        for name, f in _declared(cls).items():
            if name in given:
                parsed.pop(_param(f), None)
            elif _param(f) in parsed:
                value = parsed.pop(_param(f))
                convert = f.metadata["flag"].to_value
                values[name] = convert(value) if convert else value
        return cls(**values, **given)

    @classmethod
    def from_keywords(cls, keywords: dict, **given):
        """The settings from a Python caller's keywords, spelled as the fields are (its own popped from
        `keywords`: what is left is no one's, and the caller says so)."""
        own = {f.name: keywords.pop(f.name) for f in fields(cls) if f.name in keywords and f.name not in given}
        return cls(**own, **given)


def refuse_leftovers(function: str, keywords: dict) -> None:
    """A keyword no settings object took: the TypeError Python raises for an unknown keyword argument."""
    if keywords:
        raise TypeError(f"{function}() got an unexpected keyword argument {next(iter(keywords))!r}")


def cli_option(declared: Flag, param: str, help: str | None = None, **more):
    """The click option of a flag no settings field holds (a command's own choice, e.g. bench's --engine);
    `more`: what this command adds (required=True)."""
    return click.option(*declared.flags, declared.param or param, help=help, **declared.click, **more)
