"""The games and seats the store holds logs of: how a game the registry does not know (an
external game, played through `sparring gateway`: docs/gateway.md) is known, from what it logged."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, func, select

from storage.tables import EPISODES as _E
from storage.tables import TURNS as _T


def logged_games(engine: Engine) -> list[str]:
    """Every game with an episode in the store, sorted."""
    return distinct_values(engine, _E.c.game)


def logged_seats(engine: Engine, game: str | None = None) -> list[str]:
    """Every seat with a turn in the store (in an episode of ``game``, when given: a read of all
    the game's turns), sorted."""
    if game is None:
        return distinct_values(engine, _T.c.seat)
    query = select(_T.c.seat).distinct().order_by(_T.c.seat)
    query = query.where(_T.c.episode_id.in_(select(_E.c.id).where(_E.c.game == game)))
    with engine.connect() as conn:
        return list(conn.scalars(query))


def distinct_values(engine: Engine, column: ColumnElement[str]) -> list[str]:
    """The values of ``column``, the first column of an index, sorted, by a loose index scan: one
    index lookup per value. ``SELECT DISTINCT`` reads the whole index (SQLite, and PostgreSQL before
    18): at 265,000 episodes, more than the rest of the episodes page costs."""
    found = select(func.min(column).label("value")).cte("found", recursive=True)
    following = select(func.min(column)).where(column > found.c.value).scalar_subquery()
    found = found.union_all(select(following).where(found.c.value.is_not(None)))
    with engine.connect() as conn:
        return list(conn.scalars(select(found.c.value).where(found.c.value.is_not(None))))


def game_logged(engine: Engine, game: str) -> bool:
    """Whether the store holds an episode of ``game``."""
    return _any(engine, select(_E.c.id).where(_E.c.game == game))


def seat_logged(engine: Engine, seat: str, game: str | None = None) -> bool:
    """Whether the store holds a turn of ``seat`` (in an episode of ``game``, when given)."""
    query = select(_T.c.id).where(_T.c.seat == seat)
    if game is not None:
        query = query.where(_T.c.episode_id.in_(select(_E.c.id).where(_E.c.game == game)))
    return _any(engine, query)


def _any(engine: Engine, query: Select[Any]) -> bool:
    with engine.connect() as conn:
        return conn.execute(query.limit(1)).first() is not None
