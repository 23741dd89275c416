"""A tiny SentencePiece tokenizer for engine tests, written without the sentencepiece package.

llama.cpp's own GGUF converter takes a Llama target's vocabulary from `tokenizer.model` (its `tokenizer.json` path
checks the pre-tokenizer against a table of known hashes, which a made-up tokenizer never matches), and OpenVINO's
tokenizer converter reads the same file. Every piece is one character, so llama.cpp's SentencePiece tokenizer, which
builds pieces by merging characters, needs no intermediate pieces: ids 0-2 are <unk> <s> </s>, id 3 is "▁" (the
word boundary both engines put before a prompt) and ids 4.. are the letters from U+0100 up."""

from __future__ import annotations

import json
import struct
from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>"]
BOUNDARY = "\u2581"
FIRST_LETTER = 0x100
# sentencepiece_model.proto: SentencePiece.Type and TrainerSpec.ModelType
NORMAL, UNKNOWN, CONTROL = 1, 2, 3
UNIGRAM = 1


def pieces(vocab_size: int) -> list[str]:
    return SPECIALS + [BOUNDARY] + [chr(FIRST_LETTER + k) for k in range(vocab_size - len(SPECIALS) - 1)]


def text_of(ids: list[int]) -> str:
    """The prompt text whose pieces are `ids` (letters only: ids >= 4), without the boundary both engines add."""
    if any(i <= len(SPECIALS) for i in ids):
        raise ValueError(f"only letter ids (>= {len(SPECIALS) + 1}) have text of their own: {ids}")
    return "".join(chr(FIRST_LETTER + i - len(SPECIALS) - 1) for i in ids)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32 values are sign-extended to ten bytes
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value) -> bytes:
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    if isinstance(value, float):
        return _varint(number << 3 | 5) + struct.pack("<f", value)
    return _varint(number << 3) + _varint(int(value))


def model_proto(vocab_size: int) -> bytes:
    body = b""
    for i, piece in enumerate(pieces(vocab_size)):
        kind = UNKNOWN if i == 0 else CONTROL if i < len(SPECIALS) else NORMAL
        score = 0.0 if i < len(SPECIALS) else -1.0
        body += _field(1, _field(1, piece.encode()) + _field(2, score) + _field(3, kind))
    # TrainerSpec: model_type, vocab_size (unk/bos/eos ids keep their defaults 0, 1, 2)
    body += _field(2, _field(3, UNIGRAM) + _field(4, vocab_size))
    # NormalizerSpec: identity, a dummy prefix, spaces kept and escaped as "▁"
    body += _field(3, _field(1, b"identity") + _field(3, True) + _field(4, False) + _field(5, True))
    return body


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """tokenizer.model and the Llama tokenizer config beside a target's config.json (replacing any tokenizer.json)."""
    folder = Path(folder)
    (folder / "tokenizer.json").unlink(missing_ok=True)
    (folder / "tokenizer.model").write_bytes(model_proto(vocab_size))
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        **special, "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "legacy": False, "model_max_length": 4096}))
