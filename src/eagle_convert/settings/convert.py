"""What `convert` is asked (ConvertSettings), with where the target's LM head and embedding are when its family's
table does not say (TargetTensors); each field declares its option of `eagle-convert convert`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from ..kinds import EAGLE1
from ..layouts import LAYOUTS, output_layouts
from ..layouts.registry import DEFAULT_OUTPUT_LAYOUTS, default_layouts_said
from ..spec import FC_BIAS_MODES
from .common import (
    ALLOW_ROPE_MISMATCH,
    ALLOW_ROPE_MISMATCH_HELP,
    DROP,
    DTYPE,
    MAX_MODEL_LEN,
    MAX_MODEL_LEN_HELP,
    TARGET_PATTERN,
    TOKEN_MAP,
)
from .declare import Declared, flag, setting

# The EAGLE-1 default's note (which vLLM refuses it) is said in --to's help.
EAGLE1_DEFAULT = LAYOUTS[DEFAULT_OUTPUT_LAYOUTS[EAGLE1]]


def _size(ctx, param, value: str) -> int:
    from ..io.units import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-shard-size") from exc


@dataclass(frozen=True)
class TargetTensors(Declared):
    """Where the target's LM head and embedding are, when its family's table does not say (targets/)."""
    target_lm_head: str | None = setting(None, flag("--target-lm-head", metavar="NAME"), help=(
        "The target's LM head tensor, for an architecture eagle-convert does not know (e.g. "
        "language_model.lm_head.weight)."))
    target_embed: str | None = setting(None, flag("--target-embed", metavar="NAME"), help=(
        "The target's input embedding tensor (e.g. language_model.model.embed_tokens.weight)."))
    lm_head_from: str | None = setting(None, flag("--lm-head-from", metavar="CHECKPOINT"), help=(
        "Read the target's LM head and embedding from this checkpoint (folder or repo id): the unquantized base of "
        "a quantized target."))


@dataclass(frozen=True)
class ConvertSettings(Declared):
    """Everything `convert` is asked besides its inputs, its output folder and how the Hub is read (HubOptions):
    docs/convert.md says each option. `to` None: the default layout for the head's kind; `progress`: bars on
    stderr (the CLI's --quiet turns them off)."""
    to: str | None = setting(None, flag("--to", type=click.Choice(output_layouts()), default=None), help=(
        "Output layout (see `eagle-convert layouts`) [default by the head's kind: "
        f"{default_layouts_said()}; vllm with --mtp]. {EAGLE1_DEFAULT.note}."))
    dtype: str = setting("auto", DTYPE, help="Output float dtype; auto = the target's torch_dtype.")
    fc_bias: str = setting("error", flag("--fc-bias", type=click.Choice(FC_BIAS_MODES), default="error",
                                         show_default=True),
                           help="What to do with an fc bias the output layout cannot hold (vLLM V1).")
    drop: tuple[str, ...] = setting((), DROP, help="Drop draft tensors matching this glob (repeatable).")
    verifier: str | None = setting(None, flag("--verifier"),
                                   help="speculators: the verifier's name or path (default: the target as given).")
    num_speculative_tokens: int = setting(3, flag("-k", "--num-speculative-tokens", default=3, show_default=True),
                                          help="k in the printed serve command.")
    max_shard_size: str | int = setting("5GB", flag("--max-shard-size", default="5GB", show_default=True,
                                                    callback=_size),
                                        help="Shard the output above this size (5GB, 500MB, bytes).")
    target_pattern: str | None = setting(None, TARGET_PATTERN, help=(
        "A target saved per rank with a custom vLLM --file-pattern, e.g. 'w-{rank}-{part}.safetensors'."))
    check_embedding: bool = setting(False, flag("--check-embedding", is_flag=True), help=(
        "Compare the draft's embedding copy with the target's even when that reads another target shard."))
    allow_nonfinite: bool = setting(False, flag("--allow-nonfinite", is_flag=True), help=(
        "Write NaN/Inf values that the source tensors hold (refused by default); the provenance records which "
        "tensors hold how many."))
    max_model_len: int | None = setting(None, MAX_MODEL_LEN, help=MAX_MODEL_LEN_HELP)
    allow_rope_mismatch: bool = setting(False, ALLOW_ROPE_MISMATCH, help=ALLOW_ROPE_MISMATCH_HELP)
    token_map: str | Path | None = setting(None, TOKEN_MAP, help=(
        "--to sglang, EAGLE-1: a hot-token map (FR-Spec; any vocab-map format), checked against the target, copied "
        "into OUT in SGLang's format and named in the serve command (--speculative-token-map)."))
    target_gguf: str | Path | None = setting(None, flag("--target-gguf", type=click.Path(exists=True, dir_okay=False),
                                                         metavar="FILE"), help=(
        "--to gguf, DFlash heads: the target's own GGUF (the file llama.cpp serves with -m), checked to be --target's; "
        "its tokenizer.* keys are copied into the draft, which llama.cpp cannot run without them."))
    engine_python: str | None = setting(None, flag("--engine-python", metavar="PATH"), help=(
        "--to openvino: the interpreter with openvino and optimum-intel that exports the head to IR (default: "
        "$OPENVINO_PYTHON, else this one)."))
    dry_run: bool = setting(False, flag("--dry-run", is_flag=True),
                            help="Print the plan and the bytes it will read; write nothing.")
    force: bool = setting(False, flag("--force", is_flag=True), help="Replace OUT if it exists.")
    progress: bool = False
    tensors: TargetTensors = TargetTensors()


@dataclass(frozen=True)
class InspectSettings(Declared):
    """What `inspect` is asked besides its path, target and Hub options."""
    drop: tuple[str, ...] = setting((), DROP, help="Ignore draft tensors matching this glob.")
    target_pattern: str | None = setting(None, TARGET_PATTERN,
                                         help="A target saved per rank with a custom vLLM --file-pattern.")
    max_model_len: int | None = setting(None, MAX_MODEL_LEN, help=MAX_MODEL_LEN_HELP)
