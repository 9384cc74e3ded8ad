"""What the gateway reads back from the store (app.gateway): an episode's status and its turns by
seat (to go on after an outage of the store), the episode and seat of a turn (to attach a reward
or a judgment to it), and how many episodes a run logged (a user's script played through it)."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Engine, func, select

from storage.tables import EPISODES, TURNS


class TurnPlace(NamedTuple):
    episode_id: str
    seat: str


def episode_status(engine: Engine, episode_id: str) -> str | None:
    """The status of episode ``episode_id`` (None when the store does not hold it)."""
    with engine.connect() as conn:
        status = conn.execute(select(EPISODES.c.status).where(EPISODES.c.id == episode_id)).scalar()
    return None if status is None else str(status)


def episode_progress(engine: Engine, episode_id: str) -> tuple[str | None, dict[str, int]]:
    """The episode's status (None when the store does not hold it) and its stored turns by seat,
    read on one connection."""
    with engine.connect() as conn:
        status = conn.execute(select(EPISODES.c.status).where(EPISODES.c.id == episode_id)).scalar()
        counts = conn.execute(select(TURNS.c.seat, func.count()).where(TURNS.c.episode_id == episode_id)
                              .group_by(TURNS.c.seat))
        return status, {str(seat): int(count) for seat, count in counts}


def turn_place(engine: Engine, turn_id: str) -> TurnPlace | None:
    """The episode and seat of turn ``turn_id`` (None when the store does not hold it)."""
    with engine.connect() as conn:
        found = conn.execute(select(TURNS.c.episode_id, TURNS.c.seat).where(TURNS.c.id == turn_id)).first()
    return None if found is None else TurnPlace(str(found.episode_id), str(found.seat))


def run_episode_count(engine: Engine, run_id: str) -> int:
    """How many episodes run ``run_id`` logged itself (its workers' runs' not counted)."""
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(EPISODES.c.run_id == run_id)).scalar_one())
