"""The order of an episode list, and the keyset condition on it: the episodes after one episode
(the next page: ``list_episodes(after=...)``; where a search's walk goes on: storage.search_page).

An order is a sort key of ``episodes`` (``-`` for descending), then the id in the same
direction, so that pages are stable when keys are equal; nulls sort last. The condition is
written as a range on the key (``key <= v AND (key < v OR id < after)``, descending), so that
an index on the key gives a range to seek into.
"""

from __future__ import annotations

import operator
from typing import Any

from sqlalchemy import ColumnElement, Connection, select

from storage.tables import EPISODES as _E

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


def after(conn: Connection, sort: str, episode_id: str) -> ColumnElement[bool]:
    """The episodes that come after episode ``episode_id`` in the ``sort`` order (its key is
    read from the store); KeyError when there is no such episode."""
    column, ident = _E.c[sort.removeprefix("-")], _E.c.id
    row = conn.execute(select(column).where(ident == episode_id)).first()
    if row is None:
        raise KeyError(f"no episode {episode_id!r} to page after; give the id of the last episode of the previous page")
    value = row[0]
    strict, loose = (operator.lt, operator.le) if sort.startswith("-") else (operator.gt, operator.ge)
    beyond_id = strict(ident, episode_id)
    if value is None:  # nulls sort last: only nulls come after a null, in id order
        return column.is_(None) & beyond_id
    beyond = loose(column, value) & (strict(column, value) | beyond_id)
    return beyond | column.is_(None) if column.nullable else beyond
