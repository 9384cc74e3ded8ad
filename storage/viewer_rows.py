"""The rows the viewer (and the commands that show runs) read that storage.queries does not: runs,
dataset snapshots, evaluations, and the training lineage (dataset snapshot -> adapter version ->
gate); the games and seats the store logged are ``storage.logged``'s.

Plain dicts out, as storage.queries gives; every query is built with SQLAlchemy (parameterised).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from storage.tables import ADAPTER_VERSIONS as _AV
from storage.tables import EVALUATIONS as _EV
from storage.tables import JOBS as _JOBS
from storage.tables import RUNS as _RUNS
from storage.tables import SNAPSHOTS as _DS


def list_runs(engine: Engine, limit: int = 100, *, game: str | None = None,
              status: str | None = None) -> list[dict[str, Any]]:
    """The newest runs (workers' runs included, each naming its parent), with their summaries
    (an evaluation run's summary holds its metrics); ``game`` and ``status`` keep those only."""
    stmt = select(*_RUNS.c).order_by(_RUNS.c.started_at.desc(), _RUNS.c.id.desc()).limit(limit)
    if game is not None:
        stmt = stmt.where(_RUNS.c.game == game)
    if status is not None:
        stmt = stmt.where(_RUNS.c.status == status)
    with engine.connect() as conn:
        return [row._asdict() for row in conn.execute(stmt)]


def run_row(engine: Engine, run_id: str) -> dict[str, Any] | None:
    """The run ``run_id``'s columns (None when there is no such run)."""
    with engine.connect() as conn:
        row = conn.execute(select(*_RUNS.c).where(_RUNS.c.id == run_id)).first()
    return None if row is None else row._asdict()


def list_datasets(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [row._asdict() for row in conn.execute(select(*_DS.c).order_by(_DS.c.created_at.desc()))]


def list_evaluations(engine: Engine) -> list[dict[str, Any]]:
    names = _AV.alias("baseline")
    stmt = (
        select(*_EV.c, _AV.c.name.label("adapter"), names.c.name.label("baseline"))
        .join(_AV, _AV.c.id == _EV.c.adapter_version_id)
        .outerjoin(names, names.c.id == _EV.c.baseline_version_id)
        .order_by(_EV.c.created_at.desc())
    )
    with engine.connect() as conn:
        return [row._asdict() for row in conn.execute(stmt)]


def lineage(engine: Engine) -> list[dict[str, Any]]:
    """Every adapter version, newest first, with what made it: its parent, the dataset
    snapshot it was trained on (how many rows, from which episodes), its training job, and
    the gate figures it was promoted or rejected on."""
    parent = _AV.alias("parent")
    stmt = (
        select(*_AV.c, parent.c.name.label("parent"))
        .outerjoin(parent, parent.c.id == _AV.c.parent_id)
        .order_by(_AV.c.created_at.desc(), _AV.c.id.desc())
    )
    with engine.connect() as conn:
        versions = [row._asdict() for row in conn.execute(stmt)]
        snapshots = {row.id: row._asdict() for row in conn.execute(select(*_DS.c))}
        jobs = {row.adapter_version_id: row._asdict()
                for row in conn.execute(select(*_JOBS.c).where(_JOBS.c.adapter_version_id.is_not(None)))}
    for version in versions:
        version["dataset"] = snapshots.get(version["dataset_snapshot_id"])
        version["job"] = jobs.get(version["id"])
        version["gate"] = (version.get("eval") or {}).get("gate")
        version["training"] = (version.get("eval") or {}).get("training")
    return versions
