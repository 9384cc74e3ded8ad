"""The games and seats the store holds logs of: how a game the registry does not know (an
external game, played through `sparring gateway`: docs/gateway.md) is known, from what it logged."""

from __future__ import annotations

from sqlalchemy import Engine, select

from storage.models import Episode, Turn

_E = Episode.__table__
_T = Turn.__table__


def logged_games(engine: Engine) -> list[str]:
    """Every game with an episode in the store, sorted."""
    with engine.connect() as conn:
        return list(conn.scalars(select(_E.c.game).distinct().order_by(_E.c.game)))


def logged_seats(engine: Engine, game: str | None = None) -> list[str]:
    """The seats with a logged turn, in episodes of ``game`` (None: of any game), sorted."""
    query = select(_T.c.seat).distinct().order_by(_T.c.seat)
    if game is not None:
        query = query.where(_T.c.episode_id.in_(select(_E.c.id).where(_E.c.game == game)))
    with engine.connect() as conn:
        return list(conn.scalars(query))
