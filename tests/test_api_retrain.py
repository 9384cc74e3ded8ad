"""`app.api.retrain.retrain` called from Python: rounds of scripted seats on a fresh SQLite store
(nothing to train, so each role is skipped; the tiny random model is the base the gates would
serve), their before/after figures, the config file under the arguments given, and bad input
refused before the store is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from heard import Heard
from sqlalchemy import select
from tiny_model import save_tiny_model

from app.api.errors import InputError
from app.api.retrain import RetrainResult, retrain
from storage.engine import open_store
from storage.models import Run

SEATS = {"actor": "scripted:calculator", "critic": "scripted:always-correct"}


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of the test's own for the store and the data; no default seats."""
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    return tmp_path


@pytest.fixture
def env(bare: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``bare``, with the tiny random model as the base model."""
    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(bare / "tiny")))
    return bare


def test_rounds_return_their_outcomes_and_the_report_figures(env: Path, sums: Path) -> None:
    """Two rounds with a report: "before" and after each round, on the report's sets; the
    config file's settings apply under the arguments given (every_episodes: the argument's)."""
    config = env / "retrain.yaml"
    config.write_text("every_episodes: 8\nsamples: 1\nmin_rows: 100000\nconcurrency: 2\n")
    url = f"sqlite:///{env / 'store.db'}"
    progress = Heard()
    result = retrain(tasks=str(sums), rounds=2, every_episodes=2, practice=0, eval_tasks=2, options={"turns": 1},
                     seats=SEATS, config_file=config, database_url=url, progress=progress)

    assert isinstance(result, RetrainResult) and result.game == "math-reflection"
    assert [(o.round, o.episodes) for o in result.rounds] == [(1, 2), (2, 2)]
    assert [[(r.role, r.status) for r in o.roles] for o in result.rounds] == [[("actor", "skipped"),
                                                                               ("critic", "skipped")]] * 2
    assert all(r.candidate is None for o in result.rounds for r in o.roles)  # scripted turns: nothing to train
    assert list(result.figures) == ["before", "round 1", "round 2"]
    assert list(result.sets) == ["heldout"] and len(result.sets["heldout"]) == 2
    for stage in result.figures.values():
        heldout = stage["heldout"]
        assert heldout.metrics["pass@turn-1"].value == 1.0 and heldout.metrics["pass@turn-1"].n == 2
    # the same scripted policies every stage: one evaluation, reused after each round
    before = result.figures["before"]["heldout"]
    assert {stage["heldout"].run_id for stage in result.figures.values()} == {before.run_id}
    assert result.title.startswith("math-reflection: 2 heldout tasks, greedy")
    assert result.learning_curve == env / "store-learning-curve.png"
    assert "pass@turn-1" in result.report_metrics

    assert [m for m in progress.methods() if m in ("loading", "loaded")] == ["loading", "loaded"]
    assert {"round 1: play", "round 2: play"} <= {name for name, *_ in progress.named("phase")}
    assert any("from the ground truth" in line for (line,) in progress.named("say"))  # judge_rows: truth, the default

    engine = open_store(url)
    with engine.connect() as conn:
        rounds = [(r.status, r.config) for r in conn.execute(select(Run.status, Run.config).order_by(Run.started_at))
                  if r.config.get("purpose", "").startswith("retrain round")]
    engine.dispose()
    assert [status for status, _ in rounds] == ["finished", "finished"]
    recorded = rounds[0][1]["config"]
    assert (recorded["every_episodes"], recorded["samples"], recorded["min_rows"], recorded["concurrency"],
            recorded["practice"]) == (2, 1, 100000, 2, 0)  # argument > file > default
    assert recorded["train_options"] == {"num_train_epochs": 2.0}


def test_without_a_report_there_are_rounds_only(env: Path, sums: Path) -> None:
    result = retrain(tasks=str(sums), every_episodes=2, samples=1, practice=0, min_rows=100000, eval_tasks=2,
                     concurrency=2, options={"turns": 1}, seats=SEATS, report=False,
                     database_url=f"sqlite:///{env / 'store.db'}")
    assert [o.round for o in result.rounds] == [1]
    assert (result.figures, result.sets, result.learning_curve) == ({}, {}, None)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"every_episodes": 1}, "every_episodes (1) must be at least samples (2)"),
        ({"trainer": "dpo", "judge_rows": "truth"}, "judge_rows 'truth' makes sft rows, but the trainer is dpo"),
        ({"learning_rate": -1.0}, "learning_rate must be a positive number"),
        ({"seats": {"referee": "scripted:echo"}}, "has no seat 'referee'"),
        ({"roles": "actor,judge"}, "judge"),
        ({"play_script": "true"}, "'math-reflection' is registered"),
        ({"game": "review-x", "roles": ["solver"], "play_script": "true"}, "give --play-script (plays training "
         "episodes) and --eval-script"),
        ({"game": "review-x", "play_script": "true", "eval_script": "true"}, "name the roles to train with --roles"),
        ({"game": "review-x", "roles": ["solver"], "practice": 4, "play_script": "true", "eval_script": "true"},
         "--practice: game 'review-x' is external"),
    ],
)
def test_bad_input_is_refused_before_the_store_is_written(bare: Path, arguments: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(InputError) as refused:
        retrain(**arguments, database_url=f"sqlite:///{bare / 'store.db'}")
    assert message in str(refused.value)
    assert not (bare / "store.db").exists()


def test_a_bad_config_file_names_the_key_and_the_file(bare: Path, sums: Path) -> None:
    config = bare / "retrain.yaml"
    config.write_text("trainer: dpo\nmin_rows: many\n")
    with pytest.raises(InputError, match=r"retrain.yaml, line 2: 'min_rows' must be an integer, got 'many'"):
        retrain(tasks=str(sums), config_file=config, database_url=f"sqlite:///{bare / 'store.db'}")
    config.write_text("every_episodes: 1\n")
    with pytest.raises(InputError, match=r"every_episodes \(1\) must be at least samples \(2\) \(settings from "):
        retrain(tasks=str(sums), config_file=config, database_url=f"sqlite:///{bare / 'store.db'}")
    assert not (bare / "store.db").exists()
