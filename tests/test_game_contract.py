"""A game from outside sparring (tests/quiz_game.py, registered by SPARRING_GAMES alone) is
played and logged, builds every dataset kind, is evaluated and gated, and its options are
options of the CLI: everything sparring knows of it comes from its GameSpec."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import quiz_game
from model_logs import as_model_turns
from typer.testing import CliRunner

from app.cli import app
from app.workers import preload
from evaluation.evaluator import Evaluator
from graphs.episodes import play
from graphs.options import GameOptionError
from graphs.policies.policy import Policy
from graphs.policies.scripted import BOTS, ScriptedBackend
from graphs.registry import EXTRA_GAMES_ENV, UnknownGameError, get_game
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.recorder import Recorder
from training.datasets import build_snapshot, load_snapshot, turn_credits
from training.datasets.reading import ReadPlan, read_episodes
from training.deploy import LivePolicies, gate_and_deploy
from training.registry import get_version, publish

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("sft", "dpo", "kto", "ppo", "reward")


@pytest.fixture
def quiz(monkeypatch):
    monkeypatch.setenv(EXTRA_GAMES_ENV, "quiz_game")
    return get_game("quiz")



def wrong_then_right(messages, request) -> str:
    """Wrong on a question's first try (but right on the first sample of even sums), right
    when told it was wrong: siblings of one prompt that differ, and refinements."""
    right = BOTS["calculator"](messages[:1], request)
    if len(messages) > 1:
        return right
    wrong_then_right.asked[messages[0]["content"]] += 1
    first_sample_of_even = wrong_then_right.asked[messages[0]["content"]] == 1 and int(right.split()[-1]) % 2 == 0
    return right if first_sample_of_even else "Answer: 0"


def test_the_game_is_registered_by_one_setting_with_no_edit_in_sparring(quiz, monkeypatch):
    assert quiz is quiz_game.GAME and quiz.build() is not None
    assert "quiz_game" in preload()  # the workers' fork server imports it
    listed = {g["game"]: g for g in json.loads(CliRunner().invoke(app, ["games", "--format", "json"]).stdout)}
    assert listed["quiz"]["options"] == "--attempts" and listed["quiz"]["gate_metrics"] == {"solver": "quiz_first_try"}
    assert listed["math-reflection"]["gate_metrics"] == {"actor": "pass@turn-1", "critic": "critic_balanced_accuracy"}
    assert listed["debate"]["gate_metrics"] == {"debater_a": "debater_a_win_rate"}

    with pytest.raises(GameOptionError, match=r"--turns: not an option of quiz \(its options: --attempts\)"):
        quiz.make_options({"turns": 2})
    result = CliRunner().invoke(app, ["play", "quiz", "--turns", "2"])
    assert result.exit_code != 0 and "--turns: not an option of quiz" in result.output
    result = CliRunner().invoke(app, ["play", "math-reflection", "--rounds", "2"])
    assert result.exit_code != 0 and "--rounds: not an option of math-reflection" in result.output
    monkeypatch.setenv(EXTRA_GAMES_ENV, "no_such_module")
    with pytest.raises(UnknownGameError, match="no_such_module"):
        get_game("quiz")


def test_the_game_plays_logs_and_builds_every_dataset_kind(quiz, store_url, tmp_path, sums):
    engine = open_store(store_url)
    tasks = [t for t in load_tasks(str(sums), n=8, seed=0, split="train") for _ in range(2)]
    wrong_then_right.asked = Counter()
    solver = Policy(ScriptedBackend.from_function(wrong_then_right))
    with Recorder(engine) as recorder:
        report = asyncio.run(play(quiz, tasks, {"solver": solver}, recorder, concurrency=1, seed=0,
                                  options=quiz.make_options({"attempts": 2})))
    assert [e.status for e in report.episodes] == ["succeeded"] * 16
    assert Counter(e.outcome["attempts"] for e in report.episodes) == {2: 12, 1: 4}
    as_model_turns(store_url, "solver")

    episodes = list(read_episodes(engine, ReadPlan(game="quiz", role="solver")))
    credits = sorted(c for e in episodes for c in turn_credits(e, "solver").values())
    assert Counter(credits) == {0.0: 12, 0.75: 12, 1.0: 4}  # the game's own rule: 0.25 less per earlier try
    rows = {}
    for kind in KINDS:
        built = build_snapshot(engine, kind, "solver", game="quiz", base_model="bundled", out_dir=tmp_path / kind)
        rows[kind] = list(load_snapshot(engine, built.id, role="solver", base_model="bundled", kind=kind))
    assert all(rows[kind] for kind in KINDS), {kind: len(r) for kind, r in rows.items()}
    assert sorted(r["reward"] for r in rows["ppo"]) == credits
    assert all(r["prompt"][0]["content"].endswith(quiz_game.INSTRUCTION) for kind in KINDS for r in rows[kind])



def test_the_game_is_evaluated_and_its_learner_gated_on_its_own_metric(quiz, store_url, tmp_path, sums,
                                                                        adapter_template):
    engine = open_store(store_url)
    base, trained = adapter_template
    candidate = publish(engine, role="solver", trained_dir=trained, adapters_root=tmp_path / "adapters",
                        base_model=base, trainer="sft", config={}, parent=None, dataset_snapshot_id=None,
                        metrics={"loss": 1.0})

    def good_under_the_adapter(messages, request) -> str:
        return BOTS["calculator"](messages, request) if request.adapter == candidate.name else "Answer: 0"

    backend = ScriptedBackend.from_function(good_under_the_adapter)
    live = LivePolicies({"solver": Policy(backend)})
    tasks = load_tasks(str(sums), n=8, seed=0, split="heldout")
    evaluate = Evaluator(engine, quiz, tasks, seed=0, options=quiz.make_options({"attempts": 2}))

    result = asyncio.run(gate_and_deploy(engine, candidate, backend, live, evaluate))
    assert (result.metric, result.candidate_value, result.baseline_value) == ("quiz_first_try", 1.0, 0.0)
    assert result.promoted and get_version(engine, candidate.name).status == "active"
    assert set(result.candidate_eval.metrics) == {"quiz_first_try", "quiz_solved"}
    assert result.baseline_eval.per_task["quiz_solved"] == {t.id: 0.0 for t in tasks}


def test_sparring_eval_plays_the_game_with_its_own_option(tmp_path, sums):
    """A fresh process, as a user runs it: the game's --attempts is an option of `sparring eval`."""
    env = {**os.environ, EXTRA_GAMES_ENV: "quiz_game", "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}",
           "SPARRING_DATABASE_URL": f"sqlite:///{tmp_path / 'quiz.db'}", "SPARRING_DATA_DIR": str(tmp_path / "data"),
           "SPARRING_SEATS": "{}"}
    args = [sys.executable, "-m", "app.cli", "eval", "--game", "quiz", "--tasks", str(sums), "-n", "8",
            "--seat", "solver=scripted:calculator", "--format", "json"]
    done = subprocess.run([*args, "--attempts", "2"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    metrics = {row["metric"]: row for row in json.loads(done.stdout)}
    assert (metrics["quiz_first_try"]["value"], metrics["quiz_first_try"]["n"]) == (1.0, 8)
    own = subprocess.run([*args[:6], "-n", "6", *args[10:]], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)  # no --tasks: the game's own task source
    assert own.returncode == 0, own.stderr
    assert {row["metric"]: row["n"] for row in json.loads(own.stdout)}["quiz_first_try"] == 6
    assert "--attempts" in subprocess.run([*args[:4], "--help"], env={**env, "COLUMNS": "200"}, cwd=ROOT,
                                          capture_output=True, text=True, timeout=300).stdout
