"""The options several commands share, declared once: how a Hub repo is read (HubOptions: every command that reads
one), and the spellings of --dtype, --drop, --token-map, --target-pattern, --max-model-len and --allow-rope-mismatch
(each setting that takes one says what it means there)."""

from __future__ import annotations

from dataclasses import dataclass

import click

from .declare import Declared, flag, setting

DTYPE = flag("--dtype", type=click.Choice(["auto", "bfloat16", "float16", "float32"]), default="auto",
             show_default=True)
DROP = flag("--drop", multiple=True, metavar="PATTERN", to_value=tuple)
TOKEN_MAP = flag("--token-map", type=click.Path(exists=True, dir_okay=False))
TARGET_PATTERN = flag("--target-pattern", metavar="PATTERN")
MAX_MODEL_LEN = flag("--max-model-len", type=click.IntRange(1), metavar="TOKENS")
ALLOW_ROPE_MISMATCH = flag("--allow-rope-mismatch", is_flag=True)

MAX_MODEL_LEN_HELP = ("The context length you will serve (tokens): the draft's and the target's position limits are "
                      "checked against it (docs/long-context.md).")
ALLOW_ROPE_MISMATCH_HELP = ("Keep the draft's own RoPE when it differs from the target's in a way that changes its "
                            "numbers (refused by default): for a head trained with its own schedule.")


@dataclass(frozen=True)
class HubOptions(Declared):
    """How a repo id is read from the Hugging Face Hub (a local folder ignores them): the draft's revision (`revision`),
    the target's (`target_revision`, for commands that read a target repo), a token, offline."""
    revision: str | None = setting(None, flag("--revision"), help="Draft repo revision (branch, tag or commit sha).")
    token: str | None = setting(None, flag("--token", envvar="HF_TOKEN"),
                                help="Hugging Face token (default: $HF_TOKEN).")
    offline: bool | None = setting(None, flag("--offline", is_flag=True, default=None),
                                   help="Use only the local cache (also HF_HUB_OFFLINE=1).")
    target_revision: str | None = setting(None, flag("--target-revision"), help="Target repo revision.")

    # The order every command lists them in (bench reads no target repo: without --target-revision).
    TWO_REPOS = ("revision", "target_revision", "token", "offline")
    DRAFT_REPO = ("revision", "token", "offline")
