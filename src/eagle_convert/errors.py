"""Typed errors. Each carries a `hint`: what the user should do next. The CLI prints `message` + `hint` as one
paragraph and exits 1; nothing else in the library prints.

An option a text names is written `option("force")`, not "--force": the same advice reaches a CLI user, who needs
`--force`, and a Python caller, who needs `force=True`. The text keeps a marker holding both spellings and is spelled
when read (`message`, `hint`, `str()`), for whoever reads it: Python's spelling unless the CLI said otherwise
(`options_spelled_for_cli`, set around every command by cli/exit_codes.py)."""

from __future__ import annotations

import contextlib
import contextvars
import json
import re

# A marker: ⟦cli spelling|python spelling⟧ (characters no message, path or JSON in a hint uses).
_MARKER = re.compile(r"\u27e6([^|\u27e7]*)\|([^\u27e7]*)\u27e7")
_FOR_CLI = contextvars.ContextVar("eagle_convert_options_for_cli", default=False)


def option(name: str, value: str | None = None, *, cli: str | None = None, python: str | None = None) -> str:
    """An option named in a message or hint: `option("fc_bias", "fold")` reads `--fc-bias fold` on the command line
    and `fc_bias="fold"` in Python; a flag (`value` None) reads `--force` / `force=True`. `cli` / `python`: the
    spellings when they are not those (`-o` / `out`, `drop=["PATTERN"]`)."""
    cli = cli or f"--{name.replace('_', '-')}" + ("" if value is None else f" {value}")
    py = python or (f"{name}=True" if value is None else f"{name}={json.dumps(value)}")
    return f"\u27e6{cli}|{py}\u27e7"


# The output folder, and the advice for one that exists: every command that writes a folder refuses it the same way.
OUT_OPTION = option("out", cli="-o", python="out")
EXISTS_HINT = f"Pass {option('force')} to replace it, or choose another {OUT_OPTION} folder."


def spelled(text: str) -> str:
    """`text` with every option() marker in it spelled for the current caller."""
    group = 1 if _FOR_CLI.get() else 2
    return _MARKER.sub(lambda m: m.group(group), text)


@contextlib.contextmanager
def options_spelled_for_cli():
    """Within this block every error text spells options as command-line flags (what the CLI sets)."""
    token = _FOR_CLI.set(True)
    try:
        yield
    finally:
        _FOR_CLI.reset(token)


class EagleConvertError(Exception):
    """Base class. `hint` says what to do next. Both texts may name options (`option()`): they are spelled for the
    caller each time they are read."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    @property
    def message(self) -> str:
        return spelled(self._message)

    @message.setter
    def message(self, text: str) -> None:
        self._message = text

    @property
    def hint(self) -> str:
        return spelled(self._hint)

    @hint.setter
    def hint(self, text: str) -> None:
        self._hint = text

    def __str__(self) -> str:
        return f"{self.message} {self.hint}".strip()


class InputWarning(UserWarning):
    """Input the run can go on with but whose results it makes doubtful (warnings.warn: Python callers filter it as
    any warning; the CLI prints it as a `warning:` paragraph on stderr)."""


class LayoutError(EagleConvertError, ValueError):
    """The checkpoint's layout is not one we recognise, or is inconsistent with itself."""


class ShapeMismatchError(EagleConvertError, ValueError):
    """Draft and target disagree (hidden size, vocab), or a tensor has the wrong shape."""


class MissingTensorError(EagleConvertError, KeyError):
    """A tensor the plan needs is not in the checkpoint."""

    __str__ = EagleConvertError.__str__  # KeyError would repr() the message


class UnexpectedTensorError(EagleConvertError, ValueError):
    """A draft tensor that no rule maps (strict by default: drop it explicitly with --drop)."""


class CorruptCheckpointError(EagleConvertError, ValueError):
    """A file that cannot be parsed: truncated or corrupt safetensors, a bad index, an unsafe pickle."""


class NonFiniteError(EagleConvertError, ValueError):
    """NaN or Inf in a tensor to be written: in the source (refused unless --allow-nonfinite), or made by a fold, a
    dequantization or a cast from finite values (always refused)."""


class UnsupportedConversionError(EagleConvertError, ValueError):
    """The requested output layout cannot express this head (e.g. EAGLE-3 to vllm-v0, fc bias to vLLM V1)."""


class UnsupportedModelError(EagleConvertError, ValueError):
    """A target architecture the bench runner does not implement."""


class OutputPathError(EagleConvertError, OSError):
    """OUT exists (without --force) or lies inside an input."""


class VerificationError(EagleConvertError, RuntimeError):
    """A written tensor does not equal its source after reloading, or speculative output diverged in fp32."""


class HubError(EagleConvertError, OSError):
    """A Hugging Face Hub problem: unknown or gated repo, missing revision, network failure, offline cache miss."""


class IncomparableReportError(EagleConvertError, ValueError):
    """A stored bench report that was made with other settings or prompts than the run it is compared with."""


class TreeShapeError(EagleConvertError, ValueError):
    """A `bench --tree` shape that cannot be drafted: contradictory options, too many tokens, a broken static tree."""


class EngineError(EagleConvertError, RuntimeError):
    """The serving engine bench drives (vLLM offline or a server) is missing, failed, or answered unusably."""


class PromptTooLongError(EagleConvertError, ValueError):
    """A bench prompt whose tokens plus --max-new-tokens pass the target's max_position_embeddings."""


class RopeMismatchError(EagleConvertError, ValueError):
    """The draft's RoPE would not compute its target's positions (another scaled schedule, a YaRN fallback, a type
    engines refuse, rope_scaling and rope_parameters that disagree): refused unless --allow-rope-mismatch."""
