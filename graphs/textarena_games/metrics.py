"""The metrics of textarena, from the store's rewards (succeeded episodes of the run).

Per episode, then the mean over a task's episodes, then over tasks (Wilson interval for 0/1
outcomes, else bootstrap): score (the player's points: 1 for a win, 1/2 for a draw, 0 for a
loss; the gate), win_rate (the player's textarena reward beats the opponent's), draw_rate (the
rewards are equal), forfeit_rate (the player lost by invalid moves). invalid_move_rate is a
ratio over the player's moves (Wilson, n = moves; per-task outcomes linearised,
``graphs.metrics.run_metrics``).
"""

from __future__ import annotations

from sqlalchemy import Engine

from graphs.metrics.episode_rewards import EpisodeRewards, episode_rewards, invalid_move_rate
from graphs.metrics.run_metrics import RunMetrics, per_task_means, task_means
from graphs.textarena_games import credit
from graphs.textarena_games.credit import OPPONENT, PLAYER


def textarena_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = [e for e in episode_rewards(engine, run_id) if (PLAYER, credit.OUTCOME) in e.rewards]

    def draw(e: EpisodeRewards) -> float:
        return float(e.value(PLAYER, credit.OUTCOME) == e.value(OPPONENT, credit.OUTCOME))

    result = task_means({
        "score": per_task_means((e.task_id, e.value(PLAYER, credit.WIN) + draw(e) / 2) for e in episodes),
        "win_rate": per_task_means((e.task_id, e.value(PLAYER, credit.WIN)) for e in episodes),
        "draw_rate": per_task_means((e.task_id, draw(e)) for e in episodes),
        "forfeit_rate": per_task_means((e.task_id, e.value(PLAYER, credit.FORFEIT)) for e in episodes),
    })
    result.metrics["invalid_move_rate"], result.per_task["invalid_move_rate"] = invalid_move_rate(
        episodes, PLAYER, credit.VALID)
    return result
