"""Typed errors. Each carries a `hint`: what the user should do next. The CLI prints `message` + `hint` as one
paragraph and exits 1; nothing else in the library prints."""

from __future__ import annotations


class EagleConvertError(Exception):
    """Base class. `hint` says what to do next."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

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
