"""Each succeeded episode of a run with its reward events, read from the store: where the
metrics of a game that scores its episodes by their rewards start (``graphs/<game>/metrics.py``).

An end-of-episode reward (``agreement``, ``outcome``) is one event per seat; a per-move reward
(``valid``) is one event per move, and ``invalid_move_rate`` counts those below 0.5.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from graphs.metrics.run_metrics import ratio
from graphs.metrics.stats import Estimate
from storage.metric_rows import run_rewards


@dataclass(frozen=True)
class Reward:
    value: float
    info: dict[str, Any]
    """the event's details ({} when it has none)"""


@dataclass
class EpisodeRewards:
    task_id: str
    rewards: dict[tuple[str, str], list[Reward]] = field(default_factory=dict)
    """(seat, reward name) -> its events in the order they were recorded"""

    def value(self, seat: str, name: str) -> float:
        """The value of the seat's latest ``name`` reward (KeyError when it got none)."""
        return self.rewards[(seat, name)][-1].value


def episode_rewards(engine: Engine, run_id: str, *, seat: str | None = None,
                    names: Collection[str] | None = None) -> list[EpisodeRewards]:
    """The run's succeeded episodes that have a reward (of ``seat``, named one of ``names``,
    where given), in episode id order."""
    found: dict[str, EpisodeRewards] = {}
    for row in run_rewards(engine, run_id, seat=seat, names=names):
        episode = found.setdefault(row.episode_id, EpisodeRewards(row.task_id))
        episode.rewards.setdefault((row.seat, row.name), []).append(Reward(row.value, row.info))
    return list(found.values())


def invalid_move_rate(episodes: Iterable[EpisodeRewards], seat: str, valid: str) -> tuple[Estimate, dict[str, float]]:
    """The share of the seat's moves whose per-move ``valid`` reward is below 0.5: Wilson over
    the moves, per-task outcomes linearised (``graphs.metrics.run_metrics.ratio``); every episode's
    task has one, 0 moves included."""
    tasks: dict[str, Counter[str]] = defaultdict(Counter)
    for episode in episodes:
        values = [r.value for r in episode.rewards.get((seat, valid), [])]
        tasks[episode.task_id].update(moves=len(values), invalid=sum(v < 0.5 for v in values))
    return ratio(tasks, lambda c: c["invalid"], lambda c: c["moves"])
