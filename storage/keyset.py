"""The order of an episode list, and keyset conditions on it: the episodes after one episode
(the next page: ``list_episodes(after=...)``), or up to one (how far a search's probe looks,
storage.search_page).

An order is a sort key of ``episodes`` (``-`` for descending), then the id in the same
direction, so that pages are stable when keys are equal; nulls sort last. Conditions are
written as ranges on the key (``key <= v AND (key < v OR id < after)`` for the episodes after
one, descending), so that an index on the key gives a range to seek into.
"""

from __future__ import annotations

import operator
from typing import Any

from sqlalchemy import ColumnElement, Connection, select

from storage.models import Episode

_E = Episode.__table__
SORT_KEYS = ("started_at", "finished_at", "reward", "num_turns", "game", "status")


def order_by(sort: str) -> list[ColumnElement[Any]]:
    """ORDER BY of ``sort``; ValueError naming the valid keys for an unknown one."""
    key = sort.removeprefix("-")
    if key not in SORT_KEYS:
        valid = ", ".join(f"{k}, -{k}" for k in SORT_KEYS)
        raise ValueError(f"unknown sort key {sort!r}; use one of: {valid}")
    column, tie = _E.c[key], _E.c.id  # the id keeps paging stable when keys are equal
    ordered, tie = (column.desc(), tie.desc()) if sort.startswith("-") else (column.asc(), tie.asc())
    # NULLS LAST only where there can be nulls: elsewhere it would keep an index from giving the order
    return [ordered.nulls_last() if column.nullable else ordered, tie]


def sort_value(conn: Connection, sort: str, episode_id: str) -> Any:
    """The ``sort`` key of episode ``episode_id``; KeyError when there is no such episode."""
    row = conn.execute(select(_E.c[sort.removeprefix("-")]).where(_E.c.id == episode_id)).first()
    if row is None:
        raise KeyError(f"no episode {episode_id!r} to page after; give the id of the last episode of the previous page")
    return row[0]


def after(sort: str, value: Any, episode_id: str) -> ColumnElement[bool]:
    """The episodes that come after episode ``episode_id``, whose ``sort`` key is ``value``."""
    return _beyond(sort, value, episode_id, later=True)


def up_to(sort: str, value: Any, episode_id: str) -> ColumnElement[bool]:
    """The episodes that come before episode ``episode_id`` (whose ``sort`` key is ``value``),
    and that episode."""
    return _beyond(sort, value, episode_id, later=False)


def _beyond(sort: str, value: Any, episode_id: str, *, later: bool) -> ColumnElement[bool]:
    column, ident = _E.c[sort.removeprefix("-")], _E.c.id
    if sort.startswith("-") == later:  # later in a descending order, or earlier in an ascending one
        strict, loose = operator.lt, operator.le
    else:
        strict, loose = operator.gt, operator.ge
    beyond_id = strict(ident, episode_id) if later else loose(ident, episode_id)  # the episode itself is up to it
    if value is None:  # nulls sort last: only nulls come after a null, in id order
        return column.is_(None) & beyond_id if later else column.is_not(None) | beyond_id
    beyond = loose(column, value) & (strict(column, value) | beyond_id)
    return beyond | column.is_(None) if later and column.nullable else beyond
