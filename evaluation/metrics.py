"""A run's metrics, computed from the store by the run's game (``GameSpec.metrics``).

Each game defines its own metrics in its package (``graphs/<game>/metrics.py``) from the
pieces of ``graphs.metrics.run_metrics``: every metric an ``Estimate`` with its per-task
outcomes, so two runs on the same tasks can be compared paired by task.
"""

from __future__ import annotations

from sqlalchemy import Engine, select

from graphs.metrics.run_metrics import RunMetrics
from graphs.registry import UnknownGameError, get_game
from storage.models import Base

_T = Base.metadata.tables


def run_estimates(engine: Engine, run_id: str) -> RunMetrics:
    """The metrics of a run's game (empty for a run of a game that is not registered here);
    the run of a `sparring play --workers N` command covers the episodes of all its workers."""
    runs = _T["runs"]
    with engine.connect() as conn:
        game = conn.execute(select(runs.c.game).where(runs.c.id == run_id)).scalar_one_or_none()
    try:
        spec = get_game(game)
    except UnknownGameError:
        return RunMetrics()
    return spec.metrics(engine, run_id)


def run_metrics(engine: Engine, run_id: str) -> dict[str, float | None]:
    """The bare values of ``run_estimates`` (what a play summary shows)."""
    return run_estimates(engine, run_id).values()
