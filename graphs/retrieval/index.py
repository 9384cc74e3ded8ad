"""Full-text search over a corpus: SQLite FTS5 in memory, ranked by bm25.

One index per corpus serves every episode of a process. A planter's documents belong to one
episode: a search inserts them inside a savepoint, queries, and rolls the savepoint back, so
they compete with the corpus under the same bm25 statistics and are never seen by another
episode (nothing is ever committed after the corpus itself).

Queries are words, never FTS5 syntax: each word of the text becomes a quoted string and the
words are joined with OR, so operators (AND, OR, NOT, NEAR), quotes, ``*``, ``^``, ``:`` and
parentheses in what a model writes are searched as text or dropped, never parsed.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphs.retrieval.corpus import Document

MAX_TERMS = 32
"""words of a query kept (a model that pastes a page in does not make a huge query)"""
TITLE_WEIGHT = 2.0
"""bm25 weight of a title match relative to one in the text"""
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Hit:
    doc: Document
    score: float
    """bm25 relevance, higher is better"""


def match_expression(query: str) -> str | None:
    """The FTS5 MATCH expression for free text: its words quoted and OR-ed; None without words.
    A word is letters, digits and underscores only, so no quote or operator character survives."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_TERMS]
    return " OR ".join(f'"{word}"' for word in words) or None


class SearchIndex:
    def __init__(self, documents: Iterable[Document]) -> None:
        self._documents = {d.id: d for d in documents}
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.execute("CREATE VIRTUAL TABLE docs USING fts5(doc_id UNINDEXED, title, text, "
                         "tokenize='porter unicode61 remove_diacritics 2')")
        self._db.executemany("INSERT INTO docs VALUES (?, ?, ?)",
                             [(d.id, d.title, d.text) for d in self._documents.values()])

    def search(self, query: str, limit: int, planted: Sequence[Document] = ()) -> list[Hit]:
        """The ``limit`` best documents for ``query``, the episode's ``planted`` ones among them."""
        expression = match_expression(query)
        if expression is None or limit < 1:
            return []
        extra = {d.id: d for d in planted}
        with self._lock:
            if extra:
                self._db.execute("SAVEPOINT planted")
            try:
                self._db.executemany("INSERT INTO docs VALUES (?, ?, ?)", [(d.id, d.title, d.text) for d in planted])
                rows = self._db.execute(
                    "SELECT doc_id, bm25(docs, 0.0, ?, 1.0) AS rank FROM docs WHERE docs MATCH ? "
                    "ORDER BY rank LIMIT ?",
                    (TITLE_WEIGHT, expression, limit),
                ).fetchall()
            finally:
                if extra:
                    self._db.execute("ROLLBACK TO planted")
                    self._db.execute("RELEASE planted")
        return [Hit(extra.get(doc_id) or self._documents[doc_id], -rank) for doc_id, rank in rows]
