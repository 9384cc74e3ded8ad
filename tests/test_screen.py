"""The greedy screen before online GRPO (``evaluation.screen``): it keeps exactly the tasks the
policy did not get right, and `sparring train grpo --screen` trains on those alone."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import select
from test_loop_cli import cli, env, runner  # noqa: F401  (env is a fixture)

from app.cli import app
from evaluation.evaluator import Evaluator
from evaluation.screen import ScreenError, not_right
from graphs.math_reflection.options import ReflectionOptions
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import get_game, scripted_bot
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.models import Episode, Run

GAME = get_game("math-reflection")


def _sums(path, wrong: set[int]):
    """Six sums; the ground truth of those in ``wrong`` is off by one, so a calculator misses them."""
    path.write_text("".join(json.dumps({"question": f"What is {a} + 5?", "answer": f"#### {a + 5 + (a in wrong)}"})
                            + "\n" for a in range(6)))
    return path


def _policies(actor: str = "calculator") -> dict[str, Policy]:
    return {"actor": Policy(scripted_bot(actor), SamplingParams(temperature=0.0)),
            "critic": Policy(scripted_bot("always-correct"), SamplingParams(temperature=0.0))}


def test_the_screen_keeps_the_tasks_the_policy_gets_wrong_in_order(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'screen.db'}")
    tasks = load_tasks(str(_sums(tmp_path / "sums.jsonl", wrong={1, 4})), n=None, seed=0, split="train")
    evaluate = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1), name="screen")
    screened = asyncio.run(not_right(evaluate, _policies(), "actor"))
    assert sorted(t.question for t in screened.kept) == ["What is 1 + 5?", "What is 4 + 5?"]
    assert screened.kept == [t for t in tasks if t in screened.kept]  # in the order they were given
    assert (screened.played, screened.failed, screened.metric) == (6, 0, "pass@turn-1")
    assert "6 tasks" in screened.describe() and "2 not right" in screened.describe()
    with engine.connect() as conn:  # logged as an evaluation run of its own
        purpose = conn.execute(select(Run.config).where(Run.id == screened.run_id)).scalar_one()["purpose"]
        played = conn.execute(select(Episode.task_id).where(Episode.run_id == screened.run_id)).scalars().all()
    assert purpose == "screen for actor" and len(played) == 6


def test_a_screen_whose_episodes_all_failed_says_so_instead_of_keeping_nothing(tmp_path):
    def broken(messages, request):
        raise RuntimeError("the model server went away")

    engine = open_store(f"sqlite:///{tmp_path / 'screen.db'}")
    tasks = load_tasks(str(_sums(tmp_path / "sums.jsonl", wrong=set())), n=None, seed=0, split="train")
    evaluate = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1))
    policies = {**_policies(), "actor": Policy(ScriptedBackend.from_function(broken), SamplingParams())}
    with pytest.raises(ScreenError, match="6 of 6 episodes failed.*without --screen"):
        asyncio.run(not_right(evaluate, policies, "actor"))


def test_train_grpo_screen_trains_on_the_screened_tasks_only(env):  # noqa: F811
    tasks = _sums(env / "sums.jsonl", wrong=set())
    trained = json.loads(cli("train", "grpo", "--role", "actor", "--tasks", str(tasks), "--screen", "3", "--fresh",
                             "--max-steps", "1", "--seat", "critic=scripted:always-correct", "--format", "json"))[0]
    assert trained["adapter"] == "actor@v1"
    engine = open_store(f"sqlite:///{env / 'loop.db'}")
    with engine.connect() as conn:
        runs = {r.config["purpose"]: r for r in conn.execute(select(Run.id, Run.config))}
        screen, rollouts = runs["screen for actor"], runs["grpo rollouts for actor"]
        screened = set(conn.execute(select(Episode.task_id).where(Episode.run_id == screen.id)).scalars())
        played = set(conn.execute(select(Episode.task_id).where(Episode.run_id == rollouts.id)).scalars())
    # the tiny random model gets no sum right: the three screened tasks are kept, and only they are played
    assert len(screened) == 3 and rollouts.config["screen"] == {"played": 3, "kept": 3, "metric": "pass@turn-1",
                                                                  "run_id": screen.id}
    assert played and played <= screened


def test_screen_is_refused_for_trainers_that_read_logs(env):  # noqa: F811
    result = runner.invoke(app, ["train", "sft", "--role", "actor", "--screen", "10"])
    assert result.exit_code != 0 and "--screen chooses the tasks online GRPO plays" in result.output
