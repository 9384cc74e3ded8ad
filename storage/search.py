"""Full-text search over what the models were prompted with and what they answered.

``episode_has_text(text)`` is a condition on episodes: the episode has a turn whose prompt
messages or response contain every word of ``text`` (in any order, whole words, case and,
on SQLite, accents ignored). The text is always taken as words, never as query syntax:
quotes, ``AND``/``OR``/``NEAR``, ``*``, ``-`` or SQL in it are searched for as plain words.
The index is migration 0003's: an FTS5 table on SQLite, a GIN ``tsvector`` index on PostgreSQL.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import BindParameter, bindparam
from sqlalchemy.types import NullType

from storage.models import Episode, Turn

_T = Turn.__table__
_WORD = re.compile(r"\w", re.UNICODE)
MAX_SEARCH_CHARS = 500
_MARKUP = str.maketrans("<>&", "   ")


class SearchError(ValueError):
    """A search string that cannot be searched for; the message says why."""


def check_search(text: str) -> str:
    """``text`` stripped, or SearchError when it has no word to search for or is too long."""
    text = text.strip()
    if len(text) > MAX_SEARCH_CHARS:
        raise SearchError(f"a search is at most {MAX_SEARCH_CHARS} characters, got {len(text)}")
    if not _WORD.search(text):
        raise SearchError(f"{text!r} has no letter or digit to search for")
    return text


def fts5_query(text: str) -> str:
    """An FTS5 query that matches every whitespace-separated piece of ``text`` as a phrase:
    each piece double-quoted (its quotes doubled), so no FTS5 operator survives."""
    pieces = [piece for piece in text.split() if _WORD.search(piece)]
    return " ".join('"' + piece.replace('"', '""') + '"' for piece in pieces)


class _TurnMatches(ColumnElement[bool]):
    """The ``turns`` row's prompt or response matches the search; rendered per database."""

    inherit_cache = False
    type = NullType()  # not Boolean: SQLite would get "... = 1", which keeps its planner from the index

    def __init__(self, text: str) -> None:
        self.text = text


@compiles(_TurnMatches, "sqlite")
def _sqlite(element: _TurnMatches, compiler: Any, **kw: Any) -> str:
    query = compiler.process(_bind(fts5_query(element.text)), **kw)
    return f"turns.id IN (SELECT turn_id FROM turn_search WHERE turn_search MATCH {query})"


@compiles(_TurnMatches, "postgresql")
def _postgres(element: _TurnMatches, compiler: Any, **kw: Any) -> str:
    query = compiler.process(_bind(element.text.translate(_MARKUP)), **kw)  # as the index does (migration 0003)
    return ("turns.id IN (SELECT turn_id FROM turn_payloads WHERE to_tsvector('simple'::regconfig, "
            f"sparring_turn_text(response, messages)) @@ plainto_tsquery('simple'::regconfig, {query}))")


@compiles(_TurnMatches)
def _other(element: _TurnMatches, compiler: Any, **kw: Any) -> str:
    raise SearchError(f"full-text search needs SQLite or PostgreSQL, not {compiler.dialect.name}")


def _bind(value: str) -> BindParameter[str]:
    return bindparam(None, value, unique=True)


def episode_has_text(text: str) -> ColumnElement[bool]:
    """Episodes with a turn whose prompt or response contains every word of ``text``
    (checked by ``check_search`` first: SearchError when it has no word)."""
    turns = select(_T.c.episode_id).where(_TurnMatches(check_search(text)))
    # OFFSET 0 keeps PostgreSQL from flattening the subquery: flattened, a page (ORDER BY
    # started_at LIMIT 50) of a word its statistics think common but that is rare scanned the
    # episodes newest first and computed each turn's tsvector (27 s at 1M turns for a word in
    # 22 turns); fenced, it reads the matches through the index first (8 ms; a word in 170k
    # turns: 0.01 -> 0.6 s). SQLite plans it the same either way.
    return Episode.__table__.c.id.in_(turns.offset(0))
