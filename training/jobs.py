"""A training job: record it, train one role's adapter, publish the result as a candidate.

The job row goes `running → succeeded | failed`. Publishing happens only after training has
finished, so a crashed trainer leaves the registry exactly as it was (and the job says why).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, update

from storage.models import JobStatus, TrainingJob
from storage.records import utcnow
from training.isolated import train_in_child
from training.registry import AdapterRecord, publish

TRAINER_KINDS = ("sft", "dpo", "kto", "ppo")
"""Trainers that learn from a dataset snapshot; ``grpo`` learns online (``extra`` carries its game)."""


class TrainingJobError(RuntimeError):
    """The trainer failed; the job row holds the error and the registry is unchanged."""


@dataclass(frozen=True)
class JobResult:
    job_id: int
    adapter: AdapterRecord
    metrics: dict[str, float]


def trainer_for(kind: str) -> tuple[Callable[..., Any], type]:
    """The train function and config class of a trainer kind."""
    from training import trainers

    table = {
        "sft": (trainers.train_sft, trainers.SFTTrainingConfig),
        "dpo": (trainers.train_dpo, trainers.DPOTrainingConfig),
        "kto": (trainers.train_kto, trainers.KTOTrainingConfig),
        "ppo": (trainers.train_ppo, trainers.PPOTrainingConfig),
        "grpo": (trainers.train_grpo, trainers.GRPOTrainingConfig),
    }
    if kind not in table:
        raise ValueError(f"unknown trainer {kind!r}; trainers: {', '.join(table)}")
    return table[kind]


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
) -> JobResult:
    """Record the job, train (``rows``: dataset rows, or the tasks GRPO plays; ``extra``: further
    keyword arguments of the trainer), publish the adapter as a candidate. ``isolated``: train
    in a child process (``training.isolated``; dataset trainers only)."""
    train, _ = trainer_for(kind)
    if isolated:
        if kind not in TRAINER_KINDS:
            raise ValueError(f"only the dataset trainers ({', '.join(TRAINER_KINDS)}) run isolated, not {kind!r}")
        train = partial(train_in_child, kind)
    extra = dict(extra or {})
    if dataset_snapshot_id is not None:
        extra["dataset_snapshot_id"] = dataset_snapshot_id
    with engine.begin() as conn:
        job_id = conn.execute(
            insert(TrainingJob).values(
                kind=kind, role=role, status=JobStatus.RUNNING, dataset_snapshot_id=dataset_snapshot_id,
                config=config.to_dict(), started_at=utcnow(),
            ).returning(TrainingJob.id)
        ).scalar_one()

    def finish(**values: Any) -> None:
        with engine.begin() as conn:
            conn.execute(update(TrainingJob).where(TrainingJob.id == job_id).values(finished_at=utcnow(), **values))

    work = Path(tempfile.mkdtemp(prefix=f"sparring-job{job_id}-"))
    try:
        result = train(
            rows, config, role=role, output_dir=work / "adapter", cache_dir=cache_dir,
            parent_adapter=parent.path if parent else None, progress=progress, **extra,
        )
        record = publish(
            engine, role=role, trained_dir=result.adapter_dir, adapters_root=adapters_root,
            base_model=config.model, trainer=kind, config=config.to_dict(),
            parent=parent.name if parent else None, dataset_snapshot_id=dataset_snapshot_id,
            metrics=result.metrics,
        )
    except BaseException as exc:
        finish(status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        if isinstance(exc, Exception):
            raise TrainingJobError(f"training job {job_id} ({kind}, role {role}) failed: {exc}") from exc
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish(status=JobStatus.SUCCEEDED, adapter_version_id=record.id, metrics=result.metrics)
    return JobResult(job_id, record, result.metrics)
