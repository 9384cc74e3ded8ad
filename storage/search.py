"""Full-text search over what the models were prompted with and what they answered.

``TextSearch(dialect, text)`` finds the episodes that have a turn whose prompt messages or
response contain every word of ``text`` (in any order, whole words, case and, on SQLite,
accents ignored). The text is always taken as words, never as query syntax: quotes,
``AND``/``OR``/``NEAR``, ``*``, ``-`` or SQL in it are searched for as plain words.

The index is migration 0006's, one row per turn that names the turn's episode: on SQLite an
FTS5 table ``turn_search`` (words only) whose rowids are those of ``turn_search_turns`` (turn,
episode); on PostgreSQL a table ``turn_search`` (turn, episode, ``tsvector``) with a GIN index.
Both have an index on the episode, so matching episodes can be read from the matching turns
(``condition``) or by checking episodes one by one (``has_match``); which one a page uses:
storage.search_page.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, column, exists, func, literal_column, select, table
from sqlalchemy.sql.expression import bindparam

from storage.tables import EPISODES as _E

_WORD = re.compile(r"\w", re.UNICODE)
MAX_SEARCH_CHARS = 500
COMMON_TURNS = 5000
"""Words in more turns than this are common (``TextSearch.matching_turns``): a page is then
read by probing episodes in order (storage.search_page). At 1M turns, reading 5,000 matches costs
about what probing the episodes a page needs does when one episode in 20 matches."""
_MARKUP = str.maketrans("<>&", "   ")
_SQLITE_TURNS = table("turn_search_turns", column("id"), column("episode_id"))
_SQLITE_WORDS = table("turn_search", column("rowid"))
_POSTGRES_TURNS = table("turn_search", column("episode_id"), column("document"))


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


class TextSearch:
    """The search for ``text`` (checked by ``check_search``: SearchError when it has no word)
    in a store of ``dialect`` (``sqlite`` or ``postgresql``)."""

    def __init__(self, dialect: str, text: str) -> None:
        if dialect not in ("sqlite", "postgresql"):
            raise SearchError(f"full-text search needs SQLite or PostgreSQL, not {dialect}")
        self.dialect, self.text = dialect, check_search(text)

    def turns(self) -> Select[Any]:
        """The episode id of every matching turn (an episode once per matching turn)."""
        if self.dialect == "sqlite":  # a join, not IN (rowids): a LIMIT then reads no further
            turns = _SQLITE_WORDS.join(_SQLITE_TURNS, _SQLITE_TURNS.c.id == _SQLITE_WORDS.c.rowid)
            return select(_SQLITE_TURNS.c.episode_id).select_from(turns).where(self._sqlite_match())
        return select(_POSTGRES_TURNS.c.episode_id).where(self._postgres_match())

    def condition(self) -> ColumnElement[bool]:
        """The condition on ``episodes``: the episode is among those of the matching turns."""
        # OFFSET 0 keeps PostgreSQL from flattening the subquery into a join that it may plan
        # the other way round; SQLite plans it the same either way
        return _E.c.id.in_(self.turns().offset(0))

    def has_match(self, episode_id: ColumnElement[str]) -> ColumnElement[bool]:
        """Whether a turn of the episode ``episode_id`` (a column of the enclosing query)
        matches: looked up through the index's episode column, one episode at a time."""
        if self.dialect == "sqlite":
            # "+ 0": checked against the set of matches, read once; on the bare rowid SQLite
            # would walk that whole set for every episode
            turn = _SQLITE_TURNS.c
            return exists().where(turn.episode_id == episode_id, (turn.id + 0).in_(self._sqlite_rowids()))
        # OFFSET 0 keeps PostgreSQL from turning the EXISTS into a join planned from the matches
        probe_turns = select(literal_column("1")).select_from(_POSTGRES_TURNS).where(
            _POSTGRES_TURNS.c.episode_id == episode_id, self._postgres_match()).offset(0)
        return probe_turns.exists()

    def matching_turns(self, conn: Connection) -> int:
        """How many turns match: exactly up to COMMON_TURNS, and past it, without reading the
        matches: exactly on SQLite (FTS5 walks its lists of rowids, some 40 ns a match), on
        PostgreSQL the planner's estimate from the statistics of ``turn_search.document`` (the
        most common words and their frequencies, which ANALYZE keeps), at least COMMON_TURNS + 1."""
        if self.dialect == "sqlite":
            return conn.execute(select(func.count()).select_from(self._sqlite_rowids().subquery())).scalar_one()
        first = self.turns().limit(COMMON_TURNS + 1).subquery()
        counted = conn.execute(select(func.count()).select_from(first)).scalar_one()
        if counted <= COMMON_TURNS:
            return counted
        matching = select(literal_column("1")).select_from(_POSTGRES_TURNS).where(self._postgres_match())
        compiled = matching.compile(dialect=conn.dialect)
        plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled}", compiled.params).scalar_one()
        return max(int(plan[0]["Plan"]["Plan Rows"]), COMMON_TURNS + 1)

    def _sqlite_rowids(self) -> Select[Any]:
        return select(_SQLITE_WORDS.c.rowid).where(self._sqlite_match())

    def _sqlite_match(self) -> ColumnElement[bool]:
        query = bindparam(None, fts5_query(self.text), unique=True)
        return literal_column("turn_search").op("MATCH")(query)

    def _postgres_match(self) -> ColumnElement[bool]:
        words = bindparam(None, self.text.translate(_MARKUP), unique=True)  # as the index does (migration 0003)
        query = func.plainto_tsquery(literal_column("'simple'::regconfig"), words)
        return _POSTGRES_TURNS.c.document.op("@@")(query)
