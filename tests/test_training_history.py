"""A training job keeps its history (what the trainer logged per step) on its row, also when it
fails, for every trainer kind, and `sparring jobs show` prints it and plots it."""

from __future__ import annotations

import json
import math
import re

import pytest
from tiny_model import save_tiny_model
from typer.testing import CliRunner

from app.cli import app
from storage.engine import open_store
from training.history import metric_names, steps, storable
from training.jobs import TrainingJobError, get_job, list_jobs, run_training_job
from training.registry import RegistryError
from training.trainers import DPOTrainingConfig, LoraSettings, PPOTrainingConfig, SFTTrainingConfig

runner = CliRunner()
SUMS = [{"prompt": [{"role": "user", "content": f"{a}+1?"}],
         "completion": [{"role": "assistant", "content": str(a + 1)}]} for a in range(8)]
PAIRS = [{"prompt": [{"role": "user", "content": f"{a}+1?"}],
          "chosen": [{"role": "assistant", "content": str(a + 1)}],
          "rejected": [{"role": "assistant", "content": str(a + 2)}]} for a in range(4)]
SAMPLES = [{"prompt_token_ids": [1, 2, 3 + a], "completion_token_ids": [5, 6, 7], "behaviour_logprobs": [-1.0] * 3,
            "advantage": 1.0 if a % 2 else -1.0} for a in range(4)]
SMALL = {"lora": LoraSettings(r=4), "per_device_train_batch_size": 2, "learning_rate": 1e-3, "max_length": 64,
         "device": "cpu"}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny")))


def _train(engine, tmp_path, kind, rows, config, **kwargs):
    return run_training_job(engine, kind=kind, role="actor", rows=rows, config=config,
                            adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", **kwargs)


def test_a_job_keeps_every_logged_step_with_loss_and_learning_rate(store, tmp_path, model):
    result = _train(store, tmp_path, "sft", SUMS, SFTTrainingConfig(model=model, max_steps=3, **SMALL))
    job = get_job(store, result.job_id)
    logged = steps(job.history)
    assert [entry["step"] for entry in logged] == [1, 2, 3]
    assert all(math.isfinite(e["loss"]) and e["learning_rate"] > 0 and "grad_norm" in e for e in logged)
    assert job.history[-1]["train_loss"] == pytest.approx(result.metrics["train_loss"])  # TRL's summary entry
    assert job.status == "succeeded" and job.adapter == "actor@v1"
    assert [j.id for j in list_jobs(store, role="actor", status="succeeded")] == [job.id]


@pytest.mark.parametrize("isolated", [False, True], ids=["in-process", "isolated"])
def test_dpo_history_holds_its_reward_margins(tmp_path, model, isolated):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    result = _train(engine, tmp_path, "dpo", PAIRS, DPOTrainingConfig(model=model, max_steps=2, **SMALL),
                    isolated=isolated)
    logged = steps(get_job(engine, result.job_id).history)
    assert len(logged) == 2 and all("rewards/margins" in e and "rewards/accuracies" in e for e in logged)
    assert metric_names(logged)[:5] == ["loss", "learning_rate", "rewards/margins", "rewards/accuracies", "grad_norm"]


def test_the_offline_ppo_loop_keeps_its_history_too(tmp_path, model):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    result = _train(engine, tmp_path, "ppo", SAMPLES, PPOTrainingConfig(model=model, max_steps=3, **SMALL))
    logged = get_job(engine, result.job_id).history
    assert [e["step"] for e in logged] == [1, 2, 3]
    assert all({"loss", "kl", "clip_fraction", "ratio_mean", "learning_rate"} <= set(e) for e in logged)
    assert {e["learning_rate"] for e in logged} == {1e-3}  # the loop's constant learning rate


def test_a_failed_job_keeps_the_steps_it_logged(tmp_path, model):
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")

    def stop_at_step_3(step: int, total: int) -> None:
        if step == 3:
            raise RuntimeError("the machine went away")

    with pytest.raises(TrainingJobError, match="went away"):
        _train(engine, tmp_path, "sft", SUMS, SFTTrainingConfig(model=model, max_steps=5, **SMALL),
               progress=stop_at_step_3)
    job = list_jobs(engine)[0]
    assert job.status == "failed" and [e["step"] for e in job.history] == [1, 2]


def test_a_config_the_registry_cannot_store_is_refused_before_training(tmp_path, model):
    """publish stores the config as strict JSON: an infinite time budget would fail there, after
    the whole run; it fails before the job starts instead."""
    engine = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    trained: list[int] = []
    with pytest.raises(RegistryError, match="config cannot be stored as JSON"):
        _train(engine, tmp_path, "ppo", SAMPLES, PPOTrainingConfig(model=model, max_seconds=math.inf, **SMALL),
               progress=lambda step, total: trained.append(step))
    assert trained == [] and list_jobs(engine) == []


def test_non_finite_values_are_stored_as_null():
    assert storable({"loss": float("nan"), "grad_norm": float("inf"), "step": 3, "flag": True, "name": "x"}) == {
        "loss": None, "grad_norm": None, "step": 3.0}


def test_jobs_show_prints_the_history_and_plots_it(tmp_path, model, monkeypatch):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    _train(open_store(url), tmp_path, "dpo", PAIRS, DPOTrainingConfig(model=model, max_steps=2, **SMALL))

    table = runner.invoke(app, ["jobs", "show", "1"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert all(name in table.output for name in ("rewards/margins", "rewards/accuracies", "learning_rate"))
    assert max(len(line) for line in table.output.splitlines()) <= 80 and "not shown" not in table.output
    shown = json.loads(runner.invoke(app, ["jobs", "show", "1", "--format", "json"]).stdout)
    assert shown["job"] == 1 and shown["status"] == "succeeded" and len(steps(shown["history"])) == 2
    lines = runner.invoke(app, ["jobs", "show", "1", "--format", "jsonl"]).stdout.splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]

    png = tmp_path / "curve.png"
    plotted = runner.invoke(app, ["jobs", "show", "1", "-m", "loss", "-m", "rewards/margins", "--plot", str(png)])
    assert plotted.exit_code == 0, plotted.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000

    unknown = runner.invoke(app, ["jobs", "show", "1", "--metric", "reward/margin"])
    assert unknown.exit_code == 2 and "rewards/margins" in unknown.output  # the metrics it did log
    missing = runner.invoke(app, ["jobs", "show", "7"])
    assert missing.exit_code == 2 and "no training job has id 7" in missing.output
    listed = json.loads(runner.invoke(app, ["jobs", "list", "--format", "json"]).stdout)
    assert [(j["job"], j["kind"], j["steps"]) for j in listed] == [(1, "dpo", 2)]


def test_report_plots_each_training_jobs_learning_signals(tmp_path, model, monkeypatch):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    engine = open_store(url)
    _train(engine, tmp_path, "sft", SUMS, SFTTrainingConfig(model=model, max_steps=2, **SMALL))
    _train(engine, tmp_path, "dpo", PAIRS, DPOTrainingConfig(model=model, max_steps=2, **SMALL))
    out = tmp_path / "report"

    result = runner.invoke(app, ["report", "--out", str(out)], env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output  # a store with training jobs only has something to show
    page = (out / "index.html").read_text()
    assert "<h2>Training jobs</h2>" in page and "actor@v2" in page
    dpo_plot = re.search(r'<img src="job-2.png" alt="job 2: ([^"]+) per step">', page)
    assert dpo_plot and "rewards/margins" in dpo_plot[1] and "learning_rate" not in dpo_plot[1]
    for name in ("job-1.png", "job-2.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "training jobs" in result.output and "dpo" in result.output
    assert all(len(line) <= 80 for line in result.output.splitlines())
