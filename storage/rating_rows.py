"""The judgments between two sides that ratings are fitted from, with the seats of their episodes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, and_, or_, select

from storage.records import EpisodeStatus
from storage.tables import EPISODE_PAYLOADS as _P
from storage.tables import EPISODES as _E
from storage.tables import JUDGMENTS as _J


@dataclass(frozen=True)
class Preference:
    """A judgment that names a winner seat and a loser seat, or neither (a tie)."""

    episode_id: str
    game: str
    judge_seat: str
    winner_seat: str | None
    loser_seat: str | None
    """both None for a tie"""
    seats: dict[str, str]
    """the episode's seats: seat -> the label of the policy that played it ({} when not logged)"""


def preferences(engine: Engine, game: str | None = None) -> list[Preference]:
    """The preferences in the store's succeeded episodes (of ``game`` only, if given), in the order
    they were judged. A tie is a judgment with no winner, no loser and no score."""
    decisive = and_(_J.c.winner_seat.is_not(None), _J.c.loser_seat.is_not(None))
    tie = and_(_J.c.winner_seat.is_(None), _J.c.loser_seat.is_(None), _J.c.score.is_(None),
               _J.c.scored_seat.is_(None))
    query = (
        select(_J.c.episode_id, _E.c.game, _J.c.judge_seat, _J.c.winner_seat, _J.c.loser_seat, _P.c.seats)
        .join(_E, _E.c.id == _J.c.episode_id)
        .join(_P, _P.c.episode_id == _J.c.episode_id)
        .where(_E.c.status == EpisodeStatus.SUCCEEDED.value, or_(decisive, tie))
        .order_by(_J.c.id)
    )
    if game is not None:
        query = query.where(_E.c.game == game)
    with engine.connect() as conn:
        return [Preference(*row[:-1], row.seats or {}) for row in conn.execute(query)]
