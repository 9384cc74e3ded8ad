"""The first matching episodes of a search (storage.search) in a page's order, read the
cheaper of two ways.

* ``matches``: read the episode of every matching turn, then those episodes, then sort them.
  Its cost grows with the matching turns: right for words in at most COMMON_TURNS turns.
* ``probe``: walk the episodes in the page's order and check each one's turns through the
  index's episode column, until enough of them match. Its cost grows with the episodes walked.

Words in more turns are probed, first through the PROBED_EPISODES first episodes (enough when
one in 40 matches; an order no index gives is sorted only that far). When those hold too few
matches (a word missing from the newest episodes, or from those a filter selects, but in many
others), the walk goes on as far down the order as reading the matches would cost:
``TextSearch.matching_turns`` times PROBES_PER_TURN episodes. Only a walk that reaches that
bound without enough matches is followed by reading the matches (``probe, then matches``), so
a page costs at most about twice the cheaper way, where reading the 100,000s of matches of
such a word took seconds at 1M turns.

The first walk lists the episodes that a turn filter (seat, policy) keeps with ``EXISTS``, as
a plain page does: it wants the first few. The walk on expects to list most of them: ``IN``
(storage.where). At 1M turns, ``seat=debater_b&q=reviewer`` (the walk on goes through 47,953
episodes and finds none; shared machine, 2026-11-24): on SQLite 390 instead of 690 ms of CPU
(``policy=stubborn``: 410 instead of 1,100 ms); on PostgreSQL (EXPLAIN ANALYZE) a hash join in
0.40-0.49 s instead of a nested-loop semi-join in 0.74-1.17 s (``policy=stubborn``: 0.50
instead of 1.57-1.66 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import ColumnElement, Connection, func, select

import storage.search
from storage import keyset
from storage.search import TextSearch
from storage.tables import EPISODES as _E
from storage.where import Where

ReadBy = Literal["matches", "probe", "probe, then matches"]
PROBED_EPISODES = 2000
"""How far a walk goes first: enough for a page when one episode in 40 matches."""
PROBES_PER_TURN = {"sqlite": 0.6, "postgresql": 0.45}
"""How many episodes a walk checks for the cost of reading one matching turn: how far it may
go on. Measured at 1M turns (bench/serve_pages.py): reading a match costs about 3.8 us on
both, checking an episode about 6 us on SQLite and 8 us on PostgreSQL."""


@dataclass
class Searched:
    ids: list[str]
    """the first matching episodes in order, as many as wanted (fewer: all there are)"""
    read_by: ReadBy


@dataclass
class _Walk:
    ids: list[str]
    last: str | None
    """the last episode walked when the walk stopped at its reach without enough matches (None:
    it found enough, or walked every episode)"""


def first_matching(conn: Connection, where: Where, search: TextSearch, sort: str, wanted: int) -> Searched:
    """The ids of the first ``wanted`` episodes in the ``sort`` order that meet ``where`` and
    ``search``, read the cheaper way (see the module's docstring)."""
    if wanted <= 0:
        return Searched([], "matches")  # nothing to read
    turns = search.matching_turns(conn)
    read_by: ReadBy = "matches"
    if turns > storage.search.COMMON_TURNS:
        first = _walk(conn, where.exists(), search, sort, wanted, PROBED_EPISODES, far=False)
        if first.last is None:  # enough, or every episode walked
            return Searched(first.ids, "probe")
        reach = int(turns * PROBES_PER_TURN[search.dialect]) - PROBED_EPISODES
        if reach > 0:
            on = where.also(keyset.after(conn, sort, first.last))
            rest = _walk(conn, on.in_(), search, sort, wanted - len(first.ids), reach, far=True)
            if rest.last is None:
                return Searched(first.ids + rest.ids, "probe")
        read_by = "probe, then matches"
    matching = select(_E.c.id).where(*where.exists(), search.condition()).order_by(*keyset.order_by(sort)).limit(wanted)
    return Searched(list(conn.scalars(matching)), read_by)


def _walk(conn: Connection, where: list[ColumnElement[bool]], search: TextSearch, sort: str, wanted: int,
          reach: int, *, far: bool) -> _Walk:
    """The first ``wanted`` matching episodes among the first ``reach`` that meet ``where``, in
    order. The episodes are sorted first, then checked one by one, and the walk stops where it
    has enough. Only the matches and the ``reach``-th episode come back, not every episode
    walked. ``far``: a walk on past the first PROBED_EPISODES, which expects to read most of
    its ``reach``."""
    sqlite = conn.dialect.name == "sqlite"
    # the LIMIT tells PostgreSQL's planner how far the walk may go; SQLite sorts under a large
    # LIMIT in a b-tree, slower than sorting every episode (docs/results/2026-11-27-benchmarks.md)
    ordered = (select(_E.c.id).where(*where).order_by(*keyset.order_by(sort))
               .limit(None if far and sqlite else reach).subquery())
    # no ORDER BY outside: the subquery's rows come in its order (a sort out here would check
    # every episode before the first row, as would checking them inside before the sort)
    checked = select(ordered.c.id, func.row_number().over().label("walked"),
                     search.has_match(ordered.c.id).label("matches")).limit(reach).subquery()
    # both LIMITs end the statement at its last row: sqlite3 steps to the row after each one it
    # returns, which could be any distance down a walk that only returns matches
    walk = select(checked).where(checked.c.matches | (checked.c.walked == reach)).limit(wanted)
    if not sqlite:
        _plan_postgres_walk(conn, far)
    found = _Walk([], None)
    with conn.execute(walk.execution_options(yield_per=wanted)) as result:  # PostgreSQL: a cursor, planned as one
        for episode_id, walked, matches in result:
            if matches:
                found.ids.append(episode_id)
            if walked == reach and len(found.ids) < wanted:
                found.last = episode_id
    return found


def _plan_postgres_walk(conn: Connection, far: bool) -> None:
    """Settings for PostgreSQL's planner, until the transaction ends. It prices the check of
    every episode, where the walk stops early: at 1M turns, JIT compiling took 0.7 s for a walk
    of 0.5 s. And it plans a cursor to read a tenth of its rows fast: a walk that goes far is
    planned for all of them (with a seat filter, a hash join in 0.45 s instead of 1.65 s of
    looking up each episode's seats)."""
    conn.exec_driver_sql("SET LOCAL jit = off")
    if far:
        conn.exec_driver_sql("SET LOCAL cursor_tuple_fraction = 1")
