"""The metrics of debate, from the store's judgments: debater_a_win_rate, debater_b_win_rate
and tie_rate (per task: 1 when it happened, the mean over the task's episodes)."""

from __future__ import annotations

from sqlalchemy import Engine

from graphs.metrics.run_metrics import RunMetrics, per_task_means, task_means
from storage.metric_rows import run_judgments


def debate_metrics(engine: Engine, run_id: str) -> RunMetrics:
    judgments = run_judgments(engine, run_id)
    outcomes = {"debater_a_win_rate": "debater_a", "debater_b_win_rate": "debater_b", "tie_rate": None}
    return task_means({name: per_task_means((j.task_id, float(j.winner_seat == seat)) for j in judgments)
                       for name, seat in outcomes.items()})
