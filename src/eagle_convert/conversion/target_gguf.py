"""`convert --target-gguf FILE`: the target's vocabulary read from the target's own GGUF (the file llama.cpp serves
with -m), for a draft that llama.cpp gives a vocabulary of its own (a DFlash head --to gguf:
layouts/gguf_dflash.py). Only the file's header is read (io/gguf_header.py). The file is checked to be the GGUF of the
HF --target before anything is copied: its token count is the target's vocab_size (llama.cpp's converter pads the
vocabulary to it) and its block count the target's layer count, so a draft is never given another model's tokens."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import UnsupportedConversionError, option
from ..io.gguf_header import GgufHeader, read_header_of
from ..layouts.base import Layout, TargetVocabulary
from ..spec import DraftSpec
from ..targets.target_info import TargetInfo

PREFIX = "tokenizer."
HINT = (f"Pass the GGUF that llama.cpp's convert_hf_to_gguf.py wrote from this "
        f"{option('target', cli='--target', python='target')} (the file llama-server loads with -m).")


def target_vocabulary(path: str | Path, layout: Layout, spec: DraftSpec, target: TargetInfo
                      ) -> tuple[TargetVocabulary, dict]:
    """The vocabulary to copy into the draft, and what eagle_convert.json records of it; or the refusal."""
    if not layout.takes_target_vocabulary(spec):
        raise UnsupportedConversionError(
            f"{option('target_gguf')} applies only to a DFlash head written with {option('to', 'gguf')} (llama.cpp "
            f"reads its mask token through a vocabulary of the draft's own); this {spec.kind.upper()} head "
            f"{option('to', layout.name)} holds no vocabulary (llama.cpp runs an EAGLE-3 draft on the target's).",
            f"Leave out {option('target_gguf')}.")
    path = Path(path)
    if not path.is_file():
        raise UnsupportedConversionError(f"{path} ({option('target_gguf')}) is not a file.", HINT)
    header = read_header_of(path)
    _check_is_the_targets(path, header, target)
    keys = {key: (header.types[key], value) for key, value in header.metadata.items() if key.startswith(PREFIX)}
    record = {"file": path.name, "bytes": path.stat().st_size, "tokens": len(header.metadata[PREFIX + "ggml.tokens"]),
              "tokenizer_keys": sorted(keys), "tokenizer_sha256": _digest(keys),
              "how": "the target GGUF's tokenizer.* keys copied into the draft, the draft's own mask token id kept"}
    return TargetVocabulary(str(path.resolve()), keys), record


def _check_is_the_targets(path: Path, header: GgufHeader, target: TargetInfo) -> None:
    tokens = header.metadata.get(PREFIX + "ggml.tokens")
    if not isinstance(tokens, list) or header.types.get(PREFIX + "ggml.tokens") != "ARRAY[STRING]":
        raise UnsupportedConversionError(f"{path} ({option('target_gguf')}) holds no vocabulary "
                                         "(no tokenizer.ggml.tokens).", HINT)
    if len(tokens) != target.vocab_size:
        raise UnsupportedConversionError(
            f"{path} is not the GGUF of this target: it holds {len(tokens):,} tokens, the target "
            f"({target.checkpoint.label}) has vocab_size {target.vocab_size:,}.", HINT)
    arch = header.metadata.get("general.architecture")
    blocks = header.metadata.get(f"{arch}.block_count")
    # llama.cpp counts a model's MTP (NextN) layers among its blocks
    nextn = int(target.config.get("num_nextn_predict_layers") or 0)
    if isinstance(blocks, int) and blocks not in (target.num_hidden_layers, target.num_hidden_layers + nextn):
        raise UnsupportedConversionError(
            f"{path} is not the GGUF of this target: it holds {blocks} layers ({arch}.block_count), the target "
            f"({target.checkpoint.label}) has num_hidden_layers {target.num_hidden_layers}.", HINT)


def _digest(keys: dict) -> str:
    """sha256 of the copied keys as JSON (name, type and value of each, in the file's order): equal digests, equal
    vocabularies."""
    return hashlib.sha256(json.dumps(keys, ensure_ascii=False).encode("utf-8")).hexdigest()
