"""The document collection a retrieval episode searches: the shipped encyclopedia or a user's
JSONL file (``--corpus FILE``), one ``{"id", "title", "text"}`` object per line.

A corpus is read and indexed once per process and file version (path, size, modification
time), so concurrent episodes share one index.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphs.retrieval.index import SearchIndex
from graphs.tasks.base import TaskSourceError
from graphs.tasks.files import _read_rows

SHIPPED_CORPUS = Path(__file__).parent / "data" / "corpus.jsonl"
CORPUS_FORMAT = 'one JSON object per line: {"id": "d001", "title": "...", "text": "..."} (title optional)'
_ID = re.compile(r"[^\s\[\],]+")
"""an id is one token with no brackets or commas, so a citation "[d001, d002]" names it"""


class CorpusError(TaskSourceError):
    """A corpus file that cannot be used: the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    def line(self) -> str:
        """How a search result shows the document."""
        return f"[{self.id}] {self.title}: {self.text}" if self.title else f"[{self.id}] {self.text}"


@dataclass(frozen=True)
class Corpus:
    name: str
    """the file's name, for messages"""
    documents: dict[str, Document]
    index: SearchIndex

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self.documents


def corpus_for(option: str) -> Corpus:
    """The corpus the ``--corpus`` option names ("" for the shipped encyclopedia)."""
    path = Path(option).expanduser() if option else SHIPPED_CORPUS
    if not path.is_file():
        raise CorpusError(f"--corpus {option}: no such file; give a JSONL corpus ({CORPUS_FORMAT}) or leave "
                          "--corpus out for the shipped encyclopedia")
    stat = path.stat()
    return _load(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _load(path: str, size: int, mtime_ns: int) -> Corpus:
    documents = read_documents(Path(path))
    return Corpus(Path(path).name, documents, SearchIndex(documents.values()))


def read_documents(path: Path) -> dict[str, Document]:
    """Every document of a corpus file, by id; CorpusError names the file and line of a bad row."""
    documents: dict[str, Document] = {}
    lines: dict[str, str] = {}
    try:
        for where, row in _read_rows(path):
            document = _document(row, where)
            if document.id in documents:
                raise CorpusError(f"{where}: the id {document.id!r} is already used at {lines[document.id]}; "
                                  "give every document its own id")
            documents[document.id], lines[document.id] = document, where
    except CorpusError:
        raise
    except TaskSourceError as exc:  # not UTF-8, not JSON: said by the task-file reader, with file and line
        raise CorpusError(f"corpus {exc}; a corpus is {CORPUS_FORMAT}") from exc
    if not documents:
        raise CorpusError(f"{path.name}: the corpus has no documents; a corpus is {CORPUS_FORMAT}")
    return documents


def _document(row: Any, where: str) -> Document:
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(row).__name__}; a corpus is {CORPUS_FORMAT}")
    missing = [key for key in ("id", "text") if key not in row]
    if missing:
        raise CorpusError(f"{where}: missing {' and '.join(repr(k) for k in missing)} (keys: {sorted(row)}); "
                          f"a corpus is {CORPUS_FORMAT}")
    doc_id, text, title = row["id"], row["text"], row.get("title", "")
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or not _ID.fullmatch(str(doc_id)):
        raise CorpusError(f"{where}: the id {doc_id!r} must be one word without spaces, brackets or commas, "
                          'e.g. "d001"')
    for key, value in (("text", text), ("title", title)):
        if not isinstance(value, str):
            raise CorpusError(f"{where}: {key!r} must be text, got {type(value).__name__}")
    if not text.strip():
        raise CorpusError(f"{where}: document {doc_id!r} has an empty 'text'; remove the line or write its text")
    return Document(str(doc_id), " ".join(title.split()), " ".join(text.split()))
