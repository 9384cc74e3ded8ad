"""The rows of training jobs (``training_jobs``): recording a job, updating it as it trains,
reading jobs back with the name parts of the adapter version each produced.

A job comes back as a dict of the table's columns plus ``adapter_role`` and
``adapter_version`` (None while it has produced none).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update

from storage.models import AdapterVersion, JobStatus, TrainingJob
from storage.tables import JOBS

_JOBS = select(
    *JOBS.c,
    AdapterVersion.role.label("adapter_role"),
    AdapterVersion.version.label("adapter_version"),
).outerjoin(AdapterVersion, AdapterVersion.id == TrainingJob.adapter_version_id)


def insert_running_job(
    engine: Engine, *, kind: str, role: str, dataset_snapshot_id: int | None, config: dict[str, Any],
    started_at: datetime,
) -> int:
    """Record a job that starts running now; returns its id."""
    with engine.begin() as conn:
        return conn.execute(
            insert(TrainingJob).values(
                kind=kind, role=role, status=JobStatus.RUNNING, dataset_snapshot_id=dataset_snapshot_id,
                config=config, started_at=started_at,
            ).returning(TrainingJob.id)
        ).scalar_one()


def update_job(engine: Engine, job_id: int, values: dict[str, Any]) -> None:
    """Set the columns ``values`` names on job ``job_id``."""
    with engine.begin() as conn:
        conn.execute(update(TrainingJob).where(TrainingJob.id == job_id).values(**values))


def fail_running_job(engine: Engine, job_id: int, *, error: str, finished_at: datetime) -> int:
    """Mark job ``job_id`` failed with ``error`` if it is still running; returns 1 if it was, else 0."""
    with engine.begin() as conn:
        return conn.execute(
            update(TrainingJob)
            .where(TrainingJob.id == job_id, TrainingJob.status == JobStatus.RUNNING)
            .values(status=JobStatus.FAILED, error=error, finished_at=finished_at)
        ).rowcount


def jobs(
    engine: Engine, *, role: str | None = None, kind: str | None = None, status: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Jobs, newest first, optionally of one role, trainer kind and status."""
    query = _JOBS.order_by(TrainingJob.id.desc()).limit(limit)
    for column, value in ((TrainingJob.role, role), (TrainingJob.kind, kind), (TrainingJob.status, status)):
        if value is not None:
            query = query.where(column == value)
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]


def job_and_newest_id(engine: Engine, job_id: int) -> tuple[dict[str, Any] | None, int | None]:
    """(job ``job_id``, or None when there is none; the id of the newest job, or None when there is none)."""
    with engine.connect() as conn:
        row = conn.execute(_JOBS.where(TrainingJob.id == job_id)).mappings().first()
        newest = conn.execute(select(TrainingJob.id).order_by(TrainingJob.id.desc()).limit(1)).scalar()
    return (None if row is None else dict(row)), newest
