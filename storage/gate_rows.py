"""What the deploy gate reads and writes in the store: the episodes, turns and rewards of a run
it compares (an external game's evaluation), and the ``evaluations`` row of each decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, func, insert, select

from storage.models import Evaluation
from storage.tables import EPISODES, REWARDS, TURNS


@dataclass(frozen=True)
class RunEpisode:
    id: str
    task_id: str
    status: str
    split: str | None
    game: str
    reward: float | None


@dataclass(frozen=True)
class RunLog:
    """What a run logged for one seat."""

    episodes: tuple[RunEpisode, ...]
    """the run's episodes, by start"""
    served: dict[str, int]
    """what served the seat's turns -> how many turns"""
    rewards: dict[str, float]
    """episode id -> the value of its latest reward of the name asked for, given to the seat"""


def run_log(engine: Engine, run_id: str, seat: str, reward_name: str | None) -> RunLog:
    """The episodes of run ``run_id``, what served ``seat``'s turns in them, and (``reward_name``)
    the latest reward of that name each episode gave the seat."""
    with engine.connect() as conn:
        episodes = conn.execute(
            select(EPISODES.c.id, EPISODES.c.task_id, EPISODES.c.status, EPISODES.c.split, EPISODES.c.game,
                   EPISODES.c.reward)
            .where(EPISODES.c.run_id == run_id).order_by(EPISODES.c.started_at)
        ).all()
        served = conn.execute(
            select(TURNS.c.served_by, func.count()).join(EPISODES)
            .where(EPISODES.c.run_id == run_id, TURNS.c.seat == seat)
            .group_by(TURNS.c.served_by)
        ).tuples().all()
        rewards: list[tuple[str, float]] = []
        if reward_name is not None:
            rewards = conn.execute(
                select(REWARDS.c.episode_id, REWARDS.c.value).join(EPISODES)
                .where(EPISODES.c.run_id == run_id, REWARDS.c.seat == seat, REWARDS.c.name == reward_name)
                .order_by(REWARDS.c.id)
            ).tuples().all()
    return RunLog(
        episodes=tuple(RunEpisode(*row) for row in episodes),
        served=dict(served),
        rewards=dict(rewards),  # in id order: the latest wins
    )


def insert_evaluation(
    engine: Engine, *, adapter_version_id: int, baseline_version_id: int | None, game: str, split: str,
    n_tasks: int, seed: int, metrics: dict[str, Any],
) -> None:
    """Keep the figures a gate decided on."""
    with engine.begin() as conn:
        conn.execute(insert(Evaluation).values(
            adapter_version_id=adapter_version_id, baseline_version_id=baseline_version_id,
            game=game, split=split, n_tasks=n_tasks, seed=seed, metrics=metrics,
        ))
