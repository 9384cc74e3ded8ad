"""A run's metrics, computed from the store by the run's game (``GameSpec.metrics``).

Each game defines its own metrics in its package (``graphs/<game>/metrics.py``) from the
pieces of ``graphs.metrics.run_metrics``: every metric an ``Estimate`` with its per-task
outcomes, so two runs on the same tasks can be compared paired by task.
"""

from __future__ import annotations

from sqlalchemy import Engine

from graphs.metrics.run_metrics import RunMetrics
from graphs.registry import UnknownGameError, get_game
from storage.evaluation_rows import run_game


def run_estimates(engine: Engine, run_id: str) -> RunMetrics:
    """The metrics of a run's game (empty for a run of a game that is not registered here);
    the run of a `sparring play --workers N` command covers the episodes of all its workers."""
    try:
        spec = get_game(run_game(engine, run_id))
    except UnknownGameError:
        return RunMetrics()
    return spec.metrics(engine, run_id)


def run_metrics(engine: Engine, run_id: str) -> dict[str, float | None]:
    """The bare values of ``run_estimates`` (what a play summary shows)."""
    return run_estimates(engine, run_id).values()
