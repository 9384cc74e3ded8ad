"""A training job that fails is recorded as failed with its error and publishes nothing; an
isolated job trains in a child process, whose death fails the job and nothing else."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest
from sqlalchemy import func, select

from storage.engine import open_store
from storage.models import AdapterVersion, TrainingJob
from tiny_model import save_tiny_model
from training.jobs import TrainingJobError, run_training_job
from training.trainers import SFTTrainingConfig


@pytest.mark.parametrize("isolated", [False, True], ids=["in-process", "isolated"])
def test_a_crashed_trainer_marks_the_job_failed_and_leaves_the_registry_alone(tmp_path, isolated):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))
    rows = [{"prompt": [{"role": "user", "content": "1+1?"}]}]  # no completion column: the trainer refuses
    with pytest.raises(TrainingJobError, match="training job 1 \\(sft, role actor\\) failed"):
        run_training_job(engine, kind="sft", role="actor", rows=rows,
                         config=SFTTrainingConfig(model=model, max_steps=1), adapters_root=tmp_path / "adapters",
                         cache_dir=tmp_path / "cache", isolated=isolated)
    with engine.connect() as conn:
        job = conn.execute(select(TrainingJob.status, TrainingJob.error, TrainingJob.finished_at)).one()
        versions = conn.execute(select(func.count()).select_from(AdapterVersion)).scalar_one()
    assert job.status == "failed" and "completion" in job.error and job.finished_at is not None
    assert versions == 0 and not (tmp_path / "adapters").exists()


SUMS = [{"prompt": [{"role": "user", "content": f"{a}+1?"}],
         "completion": [{"role": "assistant", "content": str(a + 1)}]} for a in range(8)]


def test_an_isolated_job_trains_in_a_child_and_reports_its_progress(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))
    steps: list[tuple[int, int, int]] = []
    job = run_training_job(engine, kind="sft", role="actor", rows=SUMS,
                           config=SFTTrainingConfig(model=model, max_steps=2, per_device_train_batch_size=4),
                           adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", isolated=True,
                           progress=lambda step, total: steps.append((step, total, os.getpid())))
    assert job.adapter.name == "actor@v1" and (job.adapter.path / "adapter_model.safetensors").exists()
    assert job.metrics["steps"] == 2
    assert [s[:2] for s in steps][-1] == (2, 2) and {s[2] for s in steps} == {os.getpid()}  # relayed to the parent
    assert not multiprocessing.active_children()
    with engine.connect() as conn:
        assert conn.execute(select(TrainingJob.status)).scalar_one() == "succeeded"


def test_a_killed_trainer_process_fails_its_job_and_the_caller_goes_on(tmp_path):
    """The OOM killer's SIGKILL, sent to the child at its first step."""
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))

    def kill_the_trainer(step: int, total: int) -> None:
        for child in multiprocessing.active_children():
            if child.name == "sparring-train-sft":
                os.kill(child.pid, signal.SIGKILL)

    with pytest.raises(TrainingJobError, match="SIGKILL: killed, out of memory"):
        run_training_job(engine, kind="sft", role="actor", rows=SUMS,
                         config=SFTTrainingConfig(model=model, max_steps=50, per_device_train_batch_size=1),
                         adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", isolated=True,
                         progress=kill_the_trainer)
    with engine.connect() as conn:
        job = conn.execute(select(TrainingJob.status, TrainingJob.error)).one()
        versions = conn.execute(select(func.count()).select_from(AdapterVersion)).scalar_one()
    assert job.status == "failed" and "SIGKILL" in job.error and versions == 0
    assert not multiprocessing.active_children()


def test_ctrl_c_while_an_isolated_job_trains_stops_the_child_and_fails_the_job(tmp_path, ctrl_c):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))
    with pytest.raises(KeyboardInterrupt):
        run_training_job(engine, kind="sft", role="actor", rows=SUMS,
                         config=SFTTrainingConfig(model=model, max_steps=50, per_device_train_batch_size=1),
                         adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", isolated=True,
                         progress=lambda step, total: os.kill(os.getpid(), signal.SIGINT))
    with engine.connect() as conn:
        job = conn.execute(select(TrainingJob.status, TrainingJob.error)).one()
    assert job.status == "failed" and "KeyboardInterrupt" in job.error
    assert not multiprocessing.active_children()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
