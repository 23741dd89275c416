"""io/gguf_header.py: a GGUF file's key/value section read from a handle, never its tensor data; damaged files
(truncated, wrong magic, lengths and counts the file cannot hold, bad UTF-8, unknown types) refused in one paragraph
that names the file and the byte offset, through the CLI with no traceback."""

from __future__ import annotations

import struct

import pytest
import torch
from click.testing import CliRunner

from eagle_convert.cli.main import main
from eagle_convert.errors import CorruptCheckpointError
from eagle_convert.io.gguf_file import GgufTensor, read_gguf, write_gguf
from eagle_convert.io.gguf_header import read_header_of

METADATA = {"general.architecture": ("STRING", "llama"), "llama.block_count": ("UINT32", 2),
            "tokenizer.ggml.tokens": ("ARRAY[STRING]", ["<unk>", "a", "é"]),
            "tokenizer.ggml.scores": ("ARRAY[FLOAT32]", [0.0, -1.5, -2.25]),
            "tokenizer.ggml.bos_token_id": ("UINT32", 1), "general.flag": ("BOOL", True)}


def written(tmp_path, tensor_type: int | None = None):
    path = tmp_path / "t.gguf"
    write_gguf(path, METADATA, [GgufTensor("w", torch.float32, (2, 3))], lambda t: torch.ones(2, 3))
    if tensor_type is not None:  # a quantized (or unknown) tensor type: the header reader must not care
        raw = bytearray(path.read_bytes())
        at = read_header_of(path).end + 8 + 1 + 4 + 16  # the info of "w": name, dim count, two dims, then its type
        raw[at:at + 4] = struct.pack("<I", tensor_type)
        path.write_bytes(bytes(raw))
    return path


def test_the_metadata_and_types_as_written(tmp_path):
    header = read_header_of(written(tmp_path))
    assert (header.version, header.tensor_count) == (3, 1)
    assert header.metadata == {k: v for k, (_, v) in METADATA.items()}
    assert header.types == {k: t for k, (t, _) in METADATA.items()}


def test_an_unknown_tensor_type_does_not_matter(tmp_path):
    path = written(tmp_path, tensor_type=9999)
    assert read_header_of(path).metadata["tokenizer.ggml.tokens"] == ["<unk>", "a", "é"]
    with pytest.raises(KeyError):  # negative control: the type was changed, and a reader of tensors would care
        read_gguf(path)


def test_tensor_data_is_never_read(tmp_path):
    """Cut the file right after the key/value section: the header still reads (a GB-sized target is never read)."""
    path = written(tmp_path)
    end = read_header_of(path).end
    path.write_bytes(path.read_bytes()[:end])
    assert read_header_of(path).metadata["llama.block_count"] == 2


def _offset_of(raw: bytes, key: str) -> int:
    return raw.index(key.encode()) + len(key)  # where the key's value type starts


def damaged(tmp_path, how: str) -> object:
    path = written(tmp_path)
    raw = bytearray(path.read_bytes())
    tokens = _offset_of(raw, "tokenizer.ggml.tokens")
    if how == "truncated":
        raw = raw[:tokens + 20]
    elif how == "magic":
        raw[:4] = b"GGML"
    elif how == "version":
        raw[4:8] = struct.pack("<I", 1)
    elif how == "huge string":
        raw[tokens + 4 + 12:tokens + 4 + 20] = struct.pack("<Q", 2 ** 62)  # the first token's length
    elif how == "huge array":
        raw[tokens + 4 + 4:tokens + 4 + 12] = struct.pack("<Q", 2 ** 60)  # the tokens' count
    elif how == "huge key count":
        raw[16:24] = struct.pack("<Q", 2 ** 63)
    elif how == "type":
        at = _offset_of(raw, "llama.block_count")
        raw[at:at + 4] = struct.pack("<I", 77)
    elif how == "utf-8":
        at = raw.index("é".encode())
        raw[at:at + 2] = b"\xff\xfe"
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("how, said", [
    ("truncated", "needs"), ("magic", "the magic is b'GGML'"), ("version", "version 1"),
    ("huge string", "needs 4,611,686,018,427,387,904 bytes"),
    ("huge array", "claims 1,152,921,504,606,846,976 elements"),
    ("huge key count", "keys cannot fit"), ("type", "value type 77"), ("utf-8", "is not UTF-8")])
def test_a_damaged_file_is_refused_naming_the_file_and_offset(tmp_path, how, said):
    path = damaged(tmp_path, how)
    with pytest.raises(CorruptCheckpointError, match="at byte \\d+") as caught:
        read_header_of(path)
    assert str(path) in caught.value.message and said in caught.value.message


def test_an_array_count_the_file_could_hold_but_no_key_has_is_refused_before_any_list_is_built(tmp_path):
    """A many-GB file passes the size check for a count of 2^24 + 1 one-byte elements; no vocabulary or merge list is
    that long, so the count is refused before Python builds the list (the file's size stated as 2^40 bytes)."""
    from eagle_convert.io.gguf_header import MAX_ARRAY, read_header

    path = written(tmp_path)
    raw = bytearray(path.read_bytes())
    scores = _offset_of(raw, "tokenizer.ggml.scores")
    raw[scores + 4 + 4:scores + 4 + 12] = struct.pack("<Q", MAX_ARRAY + 1)
    path.write_bytes(bytes(raw))
    with open(path, "rb") as f, pytest.raises(CorruptCheckpointError, match="claims 16,777,217 elements"):
        read_header(f, str(path), size=1 << 40)


def test_negative_control_the_damage_helper_changes_nothing_unasked(tmp_path):
    assert read_header_of(damaged(tmp_path, "none")).metadata["llama.block_count"] == 2


def test_the_cli_says_it_in_one_paragraph(tmp_path):
    """Through `convert --target-gguf`: exit 1, the file and offset named, no traceback."""
    from eagle_convert.testing.dflash import build_dflash_set

    heads = build_dflash_set(tmp_path / "set", layers=1)
    bad = damaged(tmp_path, "huge array")
    run = CliRunner().invoke(main, ["convert", str(heads["zlab"]), "-t", str(heads["target"]), "--to", "gguf",
                                    "--target-gguf", str(bad), "-o", str(tmp_path / "out")])
    assert run.exit_code == 1 and "Traceback" not in run.output, run.output
    assert str(bad) in run.output and "at byte" in run.output
    assert not (tmp_path / "out").exists()
