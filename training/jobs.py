"""A training job: record it, train one role's adapter, publish the result as a candidate.

The job row goes `running → succeeded | failed`. Publishing happens only after training has
finished, so a crashed trainer leaves the registry exactly as it was (and the job says why).
The trainer's log entries (``training.history``) are written to the row as they come, at most
every ``HISTORY_WRITE_S`` seconds and when the job ends: a failed or killed job keeps them too.
A job trains in a temporary folder whose ``owner.json`` names its host and process: a process
killed outright (SIGKILL) leaves the row ``running`` and the folder behind, and
``fail_stale_jobs`` (run by the commands that start work) fails such jobs and removes their
folders once that process is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from storage import job_rows
from storage.models import JobStatus
from storage.orphans import process_exists
from storage.records import utcnow
from training.adapter_folders import version_name
from training.history import HistoryEntry, storable
from training.isolated import train_in_child
from training.registry import AdapterRecord, check_json, publish

JOB_FOLDER_PREFIX = "sparring-job"
OWNER_FILE = "owner.json"
STALE_JOB_ERROR = "interrupted: the process training it ended"
HISTORY_WRITE_S = 5.0
"""Least seconds between two writes of a running job's history to its row."""


class TrainingJobError(RuntimeError):
    """The trainer failed; the job row holds the error and the registry is unchanged."""


@dataclass(frozen=True)
class JobResult:
    job_id: int
    adapter: AdapterRecord
    metrics: dict[str, float]


@dataclass(frozen=True)
class JobRecord:
    """One training job, as its row holds it."""

    id: int
    kind: str
    role: str
    status: str
    dataset_snapshot_id: int | None
    adapter: str | None
    """the name of the adapter version it published"""
    config: dict[str, Any]
    metrics: dict[str, Any] | None
    history: list[HistoryEntry]
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None


def run_training_job(
    engine: Engine,
    *,
    kind: str,
    role: str,
    rows: Sequence[Mapping[str, Any]] | Any,
    config: Any,
    adapters_root: Path,
    cache_dir: Path,
    parent: AdapterRecord | None = None,
    dataset_snapshot_id: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    extra: Mapping[str, Any] | None = None,
    isolated: bool = False,
    processes: int = 1,
) -> JobResult:
    """Record the job, train (``kind``: a row of ``training.trainers.kinds``; ``rows``: dataset
    rows, or the tasks GRPO plays; ``extra``: further keyword arguments of the trainer), publish
    the adapter as a candidate. ``isolated``: train in a child process (``training.isolated``;
    dataset trainers only). ``processes`` above 1: in that many, data-parallel, with the
    config's effective batch (data-parallel trainers only; isolated implied)."""
    from training.trainers.kinds import kind_names, trainer_kind

    train = trainer_kind(kind).train
    per_process = processes_config(kind, processes, config)  # before the job is recorded
    if isolated or processes > 1:
        if not trainer_kind(kind).reads_snapshot:
            dataset_kinds = ", ".join(kind_names(reads_snapshot=True))
            raise ValueError(f"only the dataset trainers ({dataset_kinds}) run isolated, not {kind!r}")
        train = partial(train_in_child, kind, processes=processes)
    check_json(config.to_dict(), "config")  # publish checks it again: refuse before training, not after
    extra = dict(extra or {})
    if dataset_snapshot_id is not None:
        extra["dataset_snapshot_id"] = dataset_snapshot_id
    job_id = job_rows.insert_running_job(
        engine, kind=kind, role=role, dataset_snapshot_id=dataset_snapshot_id, config=config.to_dict(),
        started_at=utcnow(),
    )

    def write(**values: Any) -> None:
        job_rows.update_job(engine, job_id, values)

    history: list[HistoryEntry] = []
    written = time.monotonic()

    def on_log(entry: Mapping[str, float]) -> None:
        nonlocal written
        history.append(storable(entry))
        if time.monotonic() - written >= HISTORY_WRITE_S:
            write(history=history)
            written = time.monotonic()

    def finish(**values: Any) -> None:
        write(finished_at=utcnow(), history=history, **values)

    work = Path(tempfile.mkdtemp(prefix=f"{JOB_FOLDER_PREFIX}{job_id}-"))
    owner = {"job": job_id, "store": store_id(engine), "host": socket.gethostname(), "pid": os.getpid()}
    (work / OWNER_FILE).write_text(json.dumps(owner))
    try:
        result = train(
            rows, per_process, role=role, output_dir=work / "adapter", cache_dir=cache_dir,
            parent_adapter=parent.path if parent else None, progress=progress, on_log=on_log, **extra,
        )
        record = publish(
            engine, role=role, trained_dir=result.adapter_dir, adapters_root=adapters_root,
            base_model=config.model, trainer=kind, config=config.to_dict(),
            parent=parent.name if parent else None, dataset_snapshot_id=dataset_snapshot_id,
            metrics=result.metrics,
        )
        # succeeded before its folder goes: a process killed in between leaves the folder, which
        # fail_stale_jobs then removes; the other order left a job running that nothing would fail
        finish(status=JobStatus.SUCCEEDED, adapter_version_id=record.id, metrics=result.metrics)
    except BaseException as exc:
        finish(status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        if isinstance(exc, Exception):
            raise TrainingJobError(f"training job {job_id} ({kind}, role {role}) failed: {exc}") from exc
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return JobResult(job_id, record, result.metrics)


def processes_config(kind: str, processes: int, config: Any) -> Any:
    """The config each of ``processes`` data-parallel processes trains ``kind`` with (the same
    effective batch, ``TrainingConfig.split_across``). ValueError, saying why, when ``kind``
    trains in one process only or the optimiser step does not split."""
    from training.trainers.kinds import kind_names, trainer_kind

    if processes > 1 and not trainer_kind(kind).data_parallel:
        several = ", ".join(kind_names(data_parallel=True, verifier=None))
        raise ValueError(f"SPARRING_TRAIN_PROCESSES={processes}: the {kind} trainer trains in one process; {several} "
                         "train in several (or set it to 1)")
    try:
        return config.split_across(processes)
    except ValueError as exc:
        raise ValueError(f"SPARRING_TRAIN_PROCESSES={processes}: {exc}") from None


def list_jobs(
    engine: Engine, *, role: str | None = None, kind: str | None = None, status: str | None = None,
    limit: int | None = None,
) -> list[JobRecord]:
    """Training jobs, newest first, optionally of one role, trainer kind and status."""
    return [_job(row) for row in job_rows.jobs(engine, role=role, kind=kind, status=status, limit=limit)]


def get_job(engine: Engine, job_id: int) -> JobRecord:
    """One training job by id; KeyError names the newest job when there is no such id."""
    row, newest = job_rows.job_and_newest_id(engine, job_id)
    if row is None:
        known = f"the newest is job {newest}" if newest is not None else "this store has none yet"
        raise KeyError(f"no training job has id {job_id} ({known}; `sparring jobs list` lists them)")
    return _job(row)


def _job(row: Mapping[str, Any]) -> JobRecord:
    return JobRecord(
        id=row["id"], kind=row["kind"], role=row["role"], status=row["status"],
        dataset_snapshot_id=row["dataset_snapshot_id"],
        adapter=version_name(row["adapter_role"], row["adapter_version"]) if row["adapter_role"] else None,
        config=row["config"], metrics=row["metrics"], history=row["history"] or [], error=row["error"],
        started_at=row["started_at"], finished_at=row["finished_at"],
    )


def fail_stale_jobs(engine: Engine) -> int:
    """Fail the ``running`` jobs of this store whose process on this host is gone and remove
    their temporary folders; returns how many jobs were failed. Jobs of other hosts or stores,
    and folders of live processes, are left alone."""
    failed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{JOB_FOLDER_PREFIX}*-*"):
        try:
            owner = json.loads((folder / OWNER_FILE).read_text())
            job_id, store, host, pid = int(owner["job"]), owner["store"], str(owner["host"]), int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a job folder of this version, or one being set up right now
        if host != socket.gethostname() or store != store_id(engine) or process_exists(pid):
            continue  # another store's folder waits for a command on that store to mark its job
        failed += job_rows.fail_running_job(engine, job_id, error=STALE_JOB_ERROR, finished_at=utcnow())
        shutil.rmtree(folder, ignore_errors=True)
    return failed


def store_id(engine: Engine) -> str:
    """The store's URL without password (a SQLite file by its absolute path): what a job
    folder's ``OWNER_FILE`` records, so that ``fail_stale_jobs`` fails only its own store's jobs."""
    url = engine.url
    if url.get_backend_name() == "sqlite":
        return f"sqlite:{os.path.abspath(url.database or '')}"
    return url.render_as_string(hide_password=True)
