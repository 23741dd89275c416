"""Turn what the user typed (a folder, or an `org/name` Hugging Face repo id) into a Checkpoint."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LayoutError
from ..io.source import FileSource, LocalSource
from .index import Checkpoint

# `org/name` as the Hub spells repo ids (huggingface_hub's validate_repo_id): each part 1-96 characters of letters,
# digits, `.`, `_` and `-`, starting with a letter or digit; no `--` or `..` anywhere, no trailing `.`. Anything else
# that is not a local folder is refused here, before any network request.
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def is_repo_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and "--" not in text and ".." not in text and not text.endswith(".")


@dataclass
class InputRef:
    label: str  # what the user typed
    checkpoint: Checkpoint
    local_dir: Path | None  # None for repo ids
    repo_id: str | None = None
    commit_sha: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def serve_name(self) -> str:
        """How an engine started from any folder finds this input: a local folder's absolute path, or the repo id."""
        return str(self.local_dir.resolve()) if self.local_dir is not None else (self.repo_id or self.label)

    def to_dict(self) -> dict:
        return {"path": str(self.local_dir) if self.local_dir else None, "repo_id": self.repo_id,
                "commit_sha": self.commit_sha, "notes": self.notes}


def absolute_if_local(name: str) -> str:
    """A path to an existing local folder made absolute (a config or command that names it then works from any
    folder); anything else (a repo id) unchanged."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else name


def open_checkpoint(source: FileSource, ranked: bool, pattern: str | None = None) -> Checkpoint:
    """One checkpoint (a draft), or, when `ranked` (a target), possibly a folder of per-rank files."""
    if not ranked:
        return Checkpoint(source)
    from .ranks.checkpoint import open_target_checkpoint

    return open_target_checkpoint(source, pattern)


def open_input(name: str | Path, *, revision: str | None = None, token: str | None = None,
               offline: bool | None = None, role: str = "draft", quiet: bool = True,
               ranges: bool | None = None, pattern: str | None = None, ranked: bool | None = None) -> InputRef:
    """A folder, or a repo id read through huggingface_hub. `ranges` (repos only): fetch tensors as byte ranges
    (default for a target) instead of whole files (default for a draft). A target may be saved per rank
    (ranks/; `pattern`: a custom vLLM --file-pattern); `ranked` looks for one in any input (inspect)."""
    ranked = role == "target" if ranked is None else ranked
    text = str(name)
    path = Path(text).expanduser()
    if path.is_dir():  # a folder that exists is that folder, however it is spelled (as transformers reads it)
        ckpt = open_checkpoint(LocalSource(path), ranked, pattern)
        return InputRef(text, ckpt, path, notes=list(ckpt.notes))
    if is_repo_id(text) and not path.exists():
        # imported late: huggingface_hub reads its environment at import
        from ..io.hub.hub_source import open_repo_source

        source, notes = open_repo_source(text, revision=revision, token=token, offline=offline, role=role,
                                         quiet=quiet, ranges=ranges)
        ckpt = open_checkpoint(source, ranked, pattern)
        return InputRef(text, ckpt, None, repo_id=text, commit_sha=source.revision(), notes=notes + list(ckpt.notes))
    if path.exists():
        raise LayoutError(f"The {role} {text} is a file, not a folder.",
                          "Pass the folder that holds config.json and the weights.")
    raise LayoutError(f"The {role} {text!r} is neither a folder nor a Hugging Face repo id (org/name).",
                      "Check the path, or pass a repo id such as yuhuili/EAGLE-LLaMA3-Instruct-8B.")
