"""The metrics of debate, from the store's judgments: debater_a_win_rate, debater_b_win_rate
and tie_rate (per task: 1 when it happened, the mean over the task's episodes)."""

from __future__ import annotations

from sqlalchemy import Engine, select

from graphs.metrics.run_metrics import RunMetrics, per_task_means, task_means
from storage.models import Base
from storage.queries import in_run

_T = Base.metadata.tables


def debate_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes, judgments = _T["episodes"], _T["judgments"]
    query = (
        select(episodes.c.task_id, judgments.c.winner_seat)
        .join(episodes, episodes.c.id == judgments.c.episode_id)
        .where(in_run(run_id), episodes.c.status == "succeeded")
    )
    with engine.connect() as conn:
        winners = list(conn.execute(query))
    outcomes = {"debater_a_win_rate": "debater_a", "debater_b_win_rate": "debater_b", "tie_rate": None}
    return task_means({name: per_task_means((task, float(winner == seat)) for task, winner in winners)
                       for name, seat in outcomes.items()})
