"""The one way a text file a user hands in is read (prompts, documents, corpora, conversations, stored reports):
bytes, decoded as strict UTF-8, so that a file in another encoding is refused in one paragraph that names the file,
the byte offset and line, and what to do, instead of a UnicodeDecodeError traceback (or an error blaming something
else). Nothing else in the package decodes a user's file.

Decisions: a UTF-8 byte-order mark is accepted and dropped (Windows editors write one; json.loads would choke on it).
A UTF-16 or UTF-32 byte-order mark is refused by name, not decoded: every trainer and engine these files feed reads
UTF-8, so accepting UTF-16 here would only move the failure somewhere else; the hint gives the `iconv` line that
converts it. A NUL byte is refused too: UTF-8 text never holds one, while UTF-16 without a byte-order mark, or a binary
file, does (and would otherwise be reported as broken JSON)."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from ..errors import EagleConvertError

FOREIGN_MARKS = (  # longest first: UTF-32-LE's mark starts with UTF-16-LE's
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)


class TextEncodingError(EagleConvertError, ValueError):
    """A text file the user gave that is not UTF-8 (another encoding, a byte-order mark of UTF-16/32, binary)."""


def _refuse(path: Path, offset: int, line: int, what: str, encoding: str = "") -> TextEncodingError:
    fixed = path.with_name(f"{path.stem}.utf8{path.suffix}")
    source = encoding or "ENCODING"  # unknown: the user knows it (cp1252, latin-1, ...), we would only guess
    return TextEncodingError(
        f"{path} is not UTF-8 text: {what} at byte {offset} (line {line}).",
        f"Save it as UTF-8 (e.g. `iconv -f {source} -t UTF-8 {path} > {fixed}`"
        + ("" if encoding else ", ENCODING being the file's own") + ") and pass the converted file.")


def _decode(raw: bytes, path: Path, start: int, number: int) -> str:
    """Bytes that start at byte `start` of the file, on line `number`, as text; or the refusal."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise _refuse(path, start + nul, number + raw.count(b"\n", 0, nul),
                      "a NUL byte (UTF-16 without a byte-order mark, or a binary file)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start:error.end].hex(" ")
        raise _refuse(path, start + error.start, number + raw.count(b"\n", 0, error.start),
                      f"invalid UTF-8 ({bad})") from None


def _check_start(head: bytes, path: Path) -> int:
    """How many leading bytes to skip (a UTF-8 byte-order mark), or the refusal of a UTF-16/32 one."""
    for mark, encoding in FOREIGN_MARKS:
        if head.startswith(mark):
            raise _refuse(path, 0, 1, f"it starts with the {encoding} byte-order mark {mark.hex(' ')}", encoding)
    return len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its line break) for each line, read one at a time so that memory holds
    one line, not the file. Lines end at \\n only (\\r\\n too, its \\r dropped), never at the other characters
    str.splitlines() breaks at (U+2028 inside a JSON string is text, not a line break)."""
    path = Path(path)
    with path.open("rb") as file:
        offset = 0
        for number, raw in enumerate(file, start=1):
            start = offset
            offset += len(raw)
            if number == 1:
                skip = _check_start(raw, path)
                raw, start = raw[skip:], start + skip
            yield number, _decode(raw, path, start, number).removesuffix("\n").removesuffix("\r")


def read_text(path: str | Path) -> str:
    """The whole file as text (for small files: a stored report), refused as text_lines refuses."""
    path = Path(path)
    raw = path.read_bytes()
    skip = _check_start(raw, path)
    return _decode(raw[skip:], path, skip, 1)
