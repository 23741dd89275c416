"""`convert --to sglang --token-map FILE`: a hot-token map (FR-Spec) for an EAGLE-1/2 head, checked against the
target's vocabulary, written beside the head in SGLang's own format and named in the serve command
(`--speculative-token-map`).

Why a copy in OUT rather than a pointer to FILE: the output is then self-contained (uploaded as one repo, SGLang's
load_token_map resolves `ORG/REPO/token_map-N.pt` by downloading that repo without its weights), the file SGLang
reads is the one that was checked (a later edit of FILE cannot change what is served), and a map given in another
format (SpecForge's dict, speculators' .npy) becomes the list of ids SGLang's `torch.load` expects. SGLang loads
weights from the folder's safetensors only, so the extra `.pt` is never read as a weight."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UnsupportedConversionError, VerificationError
from ..kinds import check_takes_token_map
from ..layouts.base import Layout
from ..spec import DraftSpec
from ..vocab.formats import FORMATS
from ..vocab.map import VocabMap, config_vocab_size
from ..vocab.token_map import read_token_map


@dataclass(frozen=True)
class TokenMapOutput:
    source: Path
    vmap: VocabMap
    file_name: str  # in OUT

    def describe(self) -> dict:
        return {"source": str(self.source), "sha256": hashlib.sha256(self.source.read_bytes()).hexdigest(),
                "file": self.file_name, "hot_tokens": self.vmap.draft_vocab_size,
                "target_vocab_size": self.vmap.target_vocab_size}


def plan_token_map(path: str | Path, spec: DraftSpec, layout: Layout, target_config: dict) -> TokenMapOutput:
    """Refused before anything is read or written: a layout whose engine has no token-map flag, a head that does not
    draft with the target's LM head (EAGLE-3), a map the one check refuses (range, duplicates, dtype...)."""
    if layout.token_map_flag is None:
        raise UnsupportedConversionError(
            f"--token-map is SGLang's --speculative-token-map; the {layout.name} layout's engine has no hot-token map, "
            "so the map would be ignored.",
            "Write --to sglang with --token-map, or convert without it (bench --token-map measures a map on our "
            "runner).")
    check_takes_token_map(spec.head_kind)
    vmap = read_token_map(path, config_vocab_size(target_config))
    return TokenMapOutput(Path(path), vmap, FORMATS["sglang"].file_names(vmap.draft_vocab_size)[0])


def write_token_map(output: TokenMapOutput, staging: Path) -> dict:
    """Into the staging folder, read back as SGLang reads it (torch.load, weights_only) and compared id for id."""
    FORMATS["sglang"].write(output.vmap, staging)
    written = torch.load(staging / output.file_name, map_location="cpu", weights_only=True)
    if not torch.equal(torch.as_tensor(written, dtype=torch.int64), output.vmap.ids_tensor()):
        raise VerificationError(f"The token map written to {output.file_name} does not read back as its ids.",
                                "Nothing was written; retry, and check the disk.")
    return output.describe()
