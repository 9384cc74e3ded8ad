"""The metrics of textarena, from the store's rewards (succeeded episodes of the run).

Per episode, then the mean over a task's episodes, then over tasks (Wilson interval for 0/1
outcomes, else bootstrap): score (the player's points: 1 for a win, 1/2 for a draw, 0 for a
loss; the gate), win_rate (the player's textarena reward beats the opponent's), draw_rate (the
rewards are equal), forfeit_rate (the player lost by invalid moves). invalid_move_rate is a
ratio over the player's moves (Wilson, n = moves; per-task outcomes linearised,
``evaluation.run_metrics``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import Engine, select

from evaluation.run_metrics import RunMetrics, per_task_means, ratio, task_means
from graphs.textarena_games import credit
from graphs.textarena_games.credit import OPPONENT, PLAYER
from storage.models import Base
from storage.queries import in_run

_T = Base.metadata.tables


@dataclass
class _Episode:
    task_id: str
    ending: dict[tuple[str, str], float] = field(default_factory=dict)
    """(seat, reward name) -> value, for the end-of-game rewards"""
    moves: int = 0
    invalid: int = 0


@dataclass(frozen=True)
class _Moves:
    invalid: int = 0
    moves: int = 0


def _episodes(engine: Engine, run_id: str) -> list[_Episode]:
    episodes, rewards = _T["episodes"], _T["rewards"]
    query = (
        select(episodes.c.id, episodes.c.task_id, rewards.c.seat, rewards.c.name, rewards.c.value)
        .join(rewards, rewards.c.episode_id == episodes.c.id)
        .where(in_run(run_id), episodes.c.status == "succeeded")
        .order_by(episodes.c.id, rewards.c.id)
    )
    found: dict[str, _Episode] = {}
    with engine.connect() as conn:
        for episode_id, task_id, seat, name, value in conn.execute(query):
            episode = found.setdefault(episode_id, _Episode(task_id))
            if name == credit.VALID:
                if seat == PLAYER:
                    episode.moves += 1
                    episode.invalid += value < 0.5
            else:
                episode.ending[(seat, name)] = value
    return [e for e in found.values() if (PLAYER, credit.OUTCOME) in e.ending]


def textarena_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = _episodes(engine, run_id)

    def draw(e: _Episode) -> float:
        return float(e.ending[(PLAYER, credit.OUTCOME)] == e.ending[(OPPONENT, credit.OUTCOME)])

    result = task_means({
        "score": per_task_means((e.task_id, e.ending[(PLAYER, credit.WIN)] + draw(e) / 2) for e in episodes),
        "win_rate": per_task_means((e.task_id, e.ending[(PLAYER, credit.WIN)]) for e in episodes),
        "draw_rate": per_task_means((e.task_id, draw(e)) for e in episodes),
        "forfeit_rate": per_task_means((e.task_id, e.ending[(PLAYER, credit.FORFEIT)]) for e in episodes),
    })
    moves: dict[str, _Moves] = defaultdict(_Moves)
    for e in episodes:
        before = moves[e.task_id]
        moves[e.task_id] = _Moves(before.invalid + e.invalid, before.moves + e.moves)
    result.metrics["invalid_move_rate"], result.per_task["invalid_move_rate"] = ratio(
        moves, lambda m: m.invalid, lambda m: m.moves)
    return result
