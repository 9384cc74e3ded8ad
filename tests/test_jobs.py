"""A training job that fails is recorded as failed with its error and publishes nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from storage.engine import open_store
from storage.models import AdapterVersion, TrainingJob
from tiny_model import save_tiny_model
from training.jobs import TrainingJobError, run_training_job
from training.trainers import SFTTrainingConfig


def test_a_crashed_trainer_marks_the_job_failed_and_leaves_the_registry_alone(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))
    rows = [{"prompt": [{"role": "user", "content": "1+1?"}]}]  # no completion column: the trainer refuses
    with pytest.raises(TrainingJobError, match="training job 1 \\(sft, role actor\\) failed"):
        run_training_job(engine, kind="sft", role="actor", rows=rows, config=SFTTrainingConfig(model=model, max_steps=1),
                         adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache")
    with engine.connect() as conn:
        job = conn.execute(select(TrainingJob.status, TrainingJob.error, TrainingJob.finished_at)).one()
        versions = conn.execute(select(func.count()).select_from(AdapterVersion)).scalar_one()
    assert job.status == "failed" and "completion" in job.error and job.finished_at is not None
    assert versions == 0 and not (tmp_path / "adapters").exists()
