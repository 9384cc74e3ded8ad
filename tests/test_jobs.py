"""A training job that fails is recorded as failed with its error and publishes nothing; an
isolated job trains in a child process, whose death fails the job and nothing else."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal

import pytest
from sqlalchemy import func, select

from storage.engine import open_store
from storage.models import AdapterVersion, TrainingJob
from tiny_model import save_tiny_model
from training.jobs import TrainingJobError, run_training_job
from training.trainers import PPOTrainingConfig, SFTTrainingConfig


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


@pytest.mark.parametrize(("processes", "victim"), [(1, "sparring-train-sft"), (2, "sparring-train-sft-rank1")],
                         ids=["isolated", "data-parallel"])
def test_a_killed_trainer_process_fails_its_job_and_the_caller_goes_on(tmp_path, processes, victim):
    """The OOM killer's SIGKILL, sent to the child (data-parallel: the rank beside rank 0) at its
    first step: the job fails, naming it, and no trainer process is left."""
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))

    def kill_the_trainer(step: int, total: int) -> None:
        for child in multiprocessing.active_children():
            if child.name == victim:
                os.kill(child.pid, signal.SIGKILL)

    with pytest.raises(TrainingJobError, match=f"{victim} exited without a result \\(signal SIGKILL: killed, out of "
                                               "memory"):
        run_training_job(engine, kind="sft", role="actor", rows=SUMS * 8,
                         config=SFTTrainingConfig(model=model, max_steps=50, per_device_train_batch_size=2),
                         adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", isolated=True,
                         processes=processes, progress=kill_the_trainer)
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


# --- data-parallel jobs (SPARRING_TRAIN_PROCESSES) ------------------------------------------


def test_a_job_trains_data_parallel_with_the_effective_batch_of_one_process(tmp_path):
    """Two processes (gloo on the CPU) train one job: each takes half of every optimiser step's
    rows, so the steps are one process's; rank 0 alone writes the adapter and reports."""
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))
    steps: list[tuple[int, int]] = []
    job = run_training_job(engine, kind="sft", role="actor", rows=SUMS,
                           config=SFTTrainingConfig(model=model, num_train_epochs=1, per_device_train_batch_size=4),
                           adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", processes=2,
                           progress=lambda step, total: steps.append((step, total)))
    assert job.metrics["processes"] == 2 and job.metrics["steps"] == 2  # 8 rows, 4 per step: 2 in each process
    assert steps[-1] == (2, 2) and not multiprocessing.active_children()
    with engine.connect() as conn:
        [recorded] = conn.execute(select(TrainingJob.status, TrainingJob.config)).all()
        versions = conn.execute(select(func.count()).select_from(AdapterVersion)).scalar_one()
    assert recorded.status == "succeeded" and recorded.config["per_device_train_batch_size"] == 4  # as asked
    assert versions == 1 and (job.adapter.path / "adapter_model.safetensors").exists()


def test_a_job_that_cannot_run_in_several_processes_is_refused_before_it_is_recorded(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    model = str(save_tiny_model(tmp_path / "tiny"))
    cases = [("ppo", PPOTrainingConfig(model=model), "the ppo trainer trains in one process; sft, dpo, kto, reward"),
             ("sft", SFTTrainingConfig(model=model, per_device_train_batch_size=3),
              "an optimiser step of 3 x 1 rows (per_device_train_batch_size x gradient_accumulation_steps) does not "
              "split among 2 processes")]
    for kind, config, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            run_training_job(engine, kind=kind, role="actor", rows=SUMS, config=config,
                             adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", processes=2)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(TrainingJob)).scalar_one() == 0


def test_the_effective_batch_splits_by_accumulation_first_then_by_batch():
    config = SFTTrainingConfig(per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert config.split_across(1) is config
    halved = config.split_across(2)
    assert (halved.per_device_train_batch_size, halved.gradient_accumulation_steps) == (4, 1)
    quarter = config.split_across(4)
    assert (quarter.per_device_train_batch_size, quarter.gradient_accumulation_steps) == (1, 2)
    with pytest.raises(ValueError, match="does not split among 3 processes"):
        config.split_across(3)
