"""Long documents for `bench --context-lengths`: the user's own (`--documents FILE`, JSONL) or a built-in corpus that
needs no network.

The built-in corpus is the Python reference manual's topics as shipped in every CPython install
(`pydoc_data/topics.py`: what `help("with")` prints; plain English prose with code samples; PSF License, the
interpreter's own): consecutive topics, in the file's order, are joined until a document holds at least
DOCUMENT_CHARS characters (~10k+ tokens with a BPE tokenizer), so the documents are fixed for a given Python version
(the report records that version and each document's sha256). Chosen over a public-domain book on PyPI because it is
present wherever the bench runs (no package to install, nothing downloaded) and its license and provenance are those of
the interpreter itself; its text changes between Python versions, so numbers compare within one version.

A documents file: one JSON object per line, LongBench-v2 style {"_id"/"id", "context", "question", optional
"choice_A".."choice_D"} or {"id", "text"} (no question: the bench asks DEFAULT_QUESTION)."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import EagleConvertError
from .prompts import read_jsonl

DOCUMENT_CHARS = 48_000
DEFAULT_QUESTION = "Summarise the text above in a few sentences."
CHOICES = ("A", "B", "C", "D")


class DocumentsError(EagleConvertError, ValueError):
    """A documents file that is not JSONL of documents, or documents too short for the lengths asked."""


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    question: str = DEFAULT_QUESTION

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def builtin_documents() -> tuple[list[Document], str]:
    """The pydoc topics corpus and its provenance line."""
    try:
        from pydoc_data.topics import topics
    except ImportError as error:  # some distributions split the standard library's data out
        raise DocumentsError(f"This Python ({sys.version.split()[0]}) has no pydoc_data, the built-in corpus.",
                             "Install the interpreter's full standard library, or pass --documents FILE.") from error
    documents, parts, size = [], [], 0
    for name, text in topics.items():
        parts.append(f"{name}\n\n{text.strip()}")
        size += len(parts[-1])
        if size >= DOCUMENT_CHARS:
            documents.append(Document(f"pydoc-{len(documents) + 1}", "\n\n".join(parts)))
            parts, size = [], 0
    version = ".".join(map(str, sys.version_info[:3]))
    return documents, f"pydoc_data.topics of Python {version} (PSF License), {len(topics)} topics"


def load_documents(path: str | Path) -> list[Document]:
    documents = read_jsonl(path, _document, lambda number, error: DocumentsError(
        f"{path}, line {number}: not a document ({error}).",
        'Each line must be {"id": ..., "context": "...", "question": "..."} (LongBench-v2 style) or '
        '{"id": ..., "text": "..."}.'))
    if not documents:
        raise DocumentsError(f"{path} holds no documents.", "Give a JSONL file with one document per line.")
    return documents


def _document(item: dict, number: int) -> Document:
    text = item.get("context", item.get("text"))
    if not isinstance(text, str) or not text.strip():
        raise ValueError('"context" or "text" must be a non-empty string')
    question = item.get("question") or DEFAULT_QUESTION
    if not isinstance(question, str):
        raise ValueError('"question" must be a string')
    choices = [f"({c}) {item[f'choice_{c}']}" for c in CHOICES if item.get(f"choice_{c}")]
    if choices:
        question = "\n".join([question, *choices])
    return Document(str(item.get("_id", item.get("id", number))), text, question)
