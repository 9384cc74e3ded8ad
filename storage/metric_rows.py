"""The rows a run's metrics are computed from: the turns, rewards and judgments of the run's
succeeded episodes (those of its workers' runs included, ``storage.queries.in_run``).

Each reader knows tables, not games: a game's metrics (``graphs/<game>/metrics.py``) name the
seats, rewards and rubrics it wants and turn the rows into figures. A reward's or turn's
``info`` is ``{}`` when it has none.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from storage.queries import in_run
from storage.records import EpisodeStatus
from storage.tables import EPISODES as _E
from storage.tables import JUDGMENTS as _J
from storage.tables import REWARDS as _R
from storage.tables import TURNS as _T


@dataclass(frozen=True)
class TurnReward:
    """A turn and one of its rewards (``reward`` None: it has none of those asked for)."""

    episode_id: str
    task_id: str
    seat: str
    idx: int
    round: int
    parsed_value: str | None
    reward: str | None
    value: float | None
    info: dict[str, Any]


@dataclass(frozen=True)
class RewardRow:
    episode_id: str
    task_id: str
    seat: str
    name: str
    value: float
    info: dict[str, Any]


@dataclass(frozen=True)
class JudgmentRow:
    episode_id: str
    task_id: str
    rubric: str | None
    winner_seat: str | None
    loser_seat: str | None
    scored_seat: str | None
    score: float | None


def _succeeded(run_id: str) -> tuple[Any, ...]:
    return in_run(run_id), _E.c.status == EpisodeStatus.SUCCEEDED.value


def turn_rewards(engine: Engine, run_id: str, *, names: Collection[str], seats: Collection[str] | None = None,
                 unrewarded: bool = True) -> list[TurnReward]:
    """The turns of the run's succeeded episodes (of ``seats``, where given) with their rewards
    named one of ``names``: a row per such reward, and with ``unrewarded`` one with reward None
    for a turn that has none of them. In episode id order, then turn order."""
    named = (_R.c.turn_id == _T.c.id) & _R.c.name.in_(names)
    query = (
        select(_E.c.id, _E.c.task_id, _T.c.seat, _T.c.idx, _T.c.round, _T.c.parsed_value, _R.c.name, _R.c.value,
               _R.c.info)
        .join(_T, _T.c.episode_id == _E.c.id)
        .join(_R, named, isouter=unrewarded)
        .where(*_succeeded(run_id))
        .order_by(_E.c.id, _T.c.idx)
    )
    if seats is not None:
        query = query.where(_T.c.seat.in_(seats))
    with engine.connect() as conn:
        return [TurnReward(*row[:-1], row.info or {}) for row in conn.execute(query)]


def run_rewards(engine: Engine, run_id: str, *, seat: str | None = None,
                names: Collection[str] | None = None) -> list[RewardRow]:
    """The reward events of the run's succeeded episodes (of ``seat``, named one of ``names``,
    where given), in episode id order, then the order they were recorded."""
    query = (
        select(_E.c.id, _E.c.task_id, _R.c.seat, _R.c.name, _R.c.value, _R.c.info)
        .join(_R, _R.c.episode_id == _E.c.id)
        .where(*_succeeded(run_id))
        .order_by(_E.c.id, _R.c.id)
    )
    if seat is not None:
        query = query.where(_R.c.seat == seat)
    if names is not None:
        query = query.where(_R.c.name.in_(names))
    with engine.connect() as conn:
        return [RewardRow(*row[:-1], row.info or {}) for row in conn.execute(query)]


def run_judgments(engine: Engine, run_id: str, *, rubrics: Collection[str] | None = None) -> list[JudgmentRow]:
    """The judgments of the run's succeeded episodes (on one of ``rubrics``, where given), in the
    order they were recorded."""
    query = (
        select(_E.c.id, _E.c.task_id, _J.c.rubric, _J.c.winner_seat, _J.c.loser_seat, _J.c.scored_seat, _J.c.score)
        .join(_J, _J.c.episode_id == _E.c.id)
        .where(*_succeeded(run_id))
        .order_by(_J.c.id)
    )
    if rubrics is not None:
        query = query.where(_J.c.rubric.in_(rubrics))
    with engine.connect() as conn:
        return [JudgmentRow(*row) for row in conn.execute(query)]
