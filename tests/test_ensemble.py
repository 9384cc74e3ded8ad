"""The ensemble game: K agents answer under instruction variants, the vote (or a judge model)
decides. Played through the CLI and the runner with scripted policies on real stores; rows are
built for the solver seat and the metrics read back from the store."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from model_logs import as_model_turns
from sqlalchemy import func, select
from tiny_model import tiny_model, tiny_tokenizer
from typer.testing import CliRunner

from app.cli import app
from graphs.ensemble import prompts
from graphs.ensemble.variants import VARIANTS
from graphs.episodes import play
from graphs.metrics.stats import wilson
from graphs.policies.base import SamplingParams
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.policy import Policy
from graphs.policies.scripted import BOTS, ScriptedBackend
from graphs.registry import get_game
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.models import Episode, Reward, Turn
from storage.recorder import Recorder
from training.datasets import build_snapshot, load_snapshot, turn_credits
from training.datasets.reading import ReadPlan, read_episodes

runner = CliRunner()
ENSEMBLE = get_game("ensemble")


def _variant(messages) -> str:
    instruction = messages[0]["content"].split("\n", 1)[1]
    return next(name for name, text in VARIANTS.items() if instruction == text)


def by_variant(messages, request) -> str:
    """Right under step-by-step and check-your-work, 'Answer: 0' under plain, no answer under
    estimate-then-compute."""
    variant = _variant(messages)
    if variant in ("step-by-step", "check-your-work"):
        return BOTS["calculator"](messages, request)
    return "Answer: 0" if variant == "plain" else "It is hard to say."


def test_four_variants_ship_and_agents_cycle_through_them():
    assert len(VARIANTS) >= 4
    question = "What is 3 + 4?"
    texts = {prompts.agent_messages(question, v)[0]["content"] for v in VARIANTS}
    assert len(texts) == len(VARIANTS) and all(t.startswith(question) and "'Answer: <number>'" in t for t in texts)
    assert ENSEMBLE.make_options({"agents": 6, "variants": "plain,check-your-work"}).agent_variants() == (
        "plain", "check-your-work") * 3
    assert ENSEMBLE.make_options({"agents": 2}).agent_variants() == ("plain", "step-by-step")
    assert prompts.parse_pick("Both look fine.\nPick: 2", 3) == 1 and prompts.parse_pick("Pick: 4", 3) is None


def test_play_via_the_cli_build_sft_rows_and_metrics(url, sums, tmp_path):
    out = runner.invoke(app, ["play", "ensemble", "-n", "8", "--tasks", str(sums), "--split", "train",
                              "--seat", "solver=scripted:calculator", "--format", "json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)[0]
    assert summary["succeeded"] == 8 and summary["failed"] == 0
    assert {summary[f"accuracy:{v}"] for v in VARIANTS} == {1.0}
    assert (summary["vote_accuracy"], summary["agreement"], summary["unanimous"]) == (1.0, 1.0, 1.0)

    engine = open_store(url)
    with engine.connect() as conn:
        turns = conn.execute(select(Turn.seat, Turn.round)).all()
        infos = conn.execute(select(Reward.info).where(Reward.name == "correct")).scalars()
        variants = Counter(info["variant"] for info in infos)
    # no judge turn: the vote decides; every agent answers in the one round
    assert len(turns) == 32 and set(turns) == {("solver", 0)}
    assert variants == {v: 8 for v in VARIANTS}

    as_model_turns(url, "solver")
    built = runner.invoke(app, ["datasets", "build", "sft", "--role", "solver", "--game", "ensemble",
                                "--format", "json"])
    assert built.exit_code == 0, built.output
    snapshot = json.loads(built.stdout)[0]
    assert snapshot["rows"] == 32 and snapshot["episodes_read"] == 8
    rows = list(load_snapshot(engine, snapshot["snapshot"], role="solver", base_model="bundled", kind="sft"))
    # one row per (task, variant): the prompts of the variants differ, so each is a state of its own
    assert len(rows) == 32
    assert Counter(_variant(r["prompt"]) for r in rows) == {v: 8 for v in VARIANTS}
    assert all(r["reward"] == 1.0 and r["completion"][0]["content"].startswith("Answer: ") for r in rows)

    metrics = ENSEMBLE.metrics(engine, summary["run_id"]).metrics
    assert metrics["solver_accuracy"] == wilson(8, 8)
    assert metrics["accuracy:plain"].n == 8 and metrics["accuracy:plain"].low == wilson(8, 8).low
    engine.dispose()


def test_each_variant_is_credited_and_measured_on_its_own(store_url, sums, tmp_path):
    engine = open_store(store_url)
    tasks = load_tasks(str(sums), n=8, seed=0, split="train")
    solver = Policy(ScriptedBackend.from_function(by_variant), SamplingParams(temperature=0))
    with Recorder(engine) as recorder:
        report = asyncio.run(play(ENSEMBLE, tasks, {"solver": solver}, recorder, concurrency=4, seed=0,
                                  options=ENSEMBLE.make_options({})))
    assert [e.status for e in report.episodes] == ["succeeded"] * 8
    first = report.episodes[0].outcome
    assert first["answers"][0] == "0" and first["answers"][2] is None and first["decided_by"] == "vote"
    assert first["agreeing"] == 2 and all(e.reward == 1.0 for e in report.episodes)  # 2 right beat 1 wrong

    as_model_turns(store_url, "solver")
    credits = Counter()
    for episode in read_episodes(engine, ReadPlan(game="ensemble", role="solver")):
        for turn in episode.turns:
            credits[(turn.idx, turn_credits(episode, "solver")[turn.turn_id])] += 1
    # agent order is variant order: plain, step-by-step, estimate-then-compute, check-your-work
    assert credits == {(0, 0.0): 8, (1, 1.0): 8, (2, 0.0): 8, (3, 1.0): 8}
    ppo = build_snapshot(engine, "ppo", "solver", game="ensemble", base_model="bundled", out_dir=tmp_path / "ppo")
    rows = list(load_snapshot(engine, ppo.id, role="solver", base_model="bundled", kind="ppo"))
    assert Counter((_variant(r["prompt"]), r["reward"]) for r in rows) == {
        ("plain", 0.0): 8, ("step-by-step", 1.0): 8, ("estimate-then-compute", 0.0): 8, ("check-your-work", 1.0): 8}
    engine.dispose()


def test_metrics_of_a_run_with_disagreement(store_url, sums):
    engine = open_store(store_url)
    tasks = load_tasks(str(sums), n=8, seed=0, split="train")
    from storage.records import RunRecord

    run = RunRecord.new("ensemble", {}, 0)
    solver = Policy(ScriptedBackend.from_function(by_variant), SamplingParams(temperature=0))
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        asyncio.run(play(ENSEMBLE, tasks, {"solver": solver}, recorder, concurrency=4, seed=0, run_id=run.id,
                         options=ENSEMBLE.make_options({"agents": 4})))
    metrics = ENSEMBLE.metrics(engine, run.id).metrics
    assert metrics["accuracy:step-by-step"] == metrics["accuracy:check-your-work"] == wilson(8, 8)
    assert metrics["accuracy:plain"] == metrics["accuracy:estimate-then-compute"] == wilson(0, 8)
    assert metrics["solver_accuracy"].value == 0.5 and metrics["solver_accuracy"].n == 8
    assert metrics["vote_accuracy"] == wilson(8, 8)
    assert metrics["agreement"].value == 0.5 and metrics["unanimous"] == wilson(0, 8)
    assert "judge_accuracy" not in metrics
    engine.dispose()


def test_a_judge_model_picks_among_the_distinct_answers(store_url, sums):
    """Three agents say 0, one is right: the vote is wrong; a judge that checks picks the right one."""
    engine = open_store(store_url)
    tasks = load_tasks(str(sums), n=4, seed=0, split="train")
    seen: list[str] = []

    def lone_right(messages, request) -> str:
        return BOTS["calculator"](messages, request) if _variant(messages) == "check-your-work" else "Answer: 0"

    def checking_judge(messages, request) -> str:
        prompt = messages[0]["content"]
        seen.append(prompt)
        question = prompt.split("Problem:\n")[1].split("\n")[0]
        right = BOTS["calculator"]([{"role": "user", "content": question}], request).removeprefix("Answer: ")
        listed = [line.removeprefix("Answer ").split(": ") for line in prompt.splitlines()
                  if line.startswith("Answer ") and line[7].isdigit()]
        return f"I checked the sum.\nPick: {next(n for n, value in listed if value == right)}"

    from storage.records import RunRecord

    run = RunRecord.new("ensemble", {}, 0)
    policies = {"solver": Policy(ScriptedBackend.from_function(lone_right), SamplingParams(temperature=0)),
                "judge": Policy(ScriptedBackend.from_function(checking_judge), SamplingParams(temperature=0))}
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        report = asyncio.run(play(ENSEMBLE, tasks, policies, recorder, concurrency=2, seed=0, run_id=run.id,
                                  options=ENSEMBLE.make_options({})))
    assert all(e.reward == 1.0 and e.outcome["decided_by"] == "judge" for e in report.episodes)
    # one judge turn per episode (a scripted backend serves its pick line as a second request)
    assert len(set(seen)) == 4 and all("Answer 1: 0" in p and "Answer 3:" not in p for p in seen)
    metrics = ENSEMBLE.metrics(engine, run.id).metrics
    assert metrics["vote_accuracy"] == wilson(0, 4) and metrics["judge_accuracy"] == wilson(4, 4)
    with engine.connect() as conn:
        picks = conn.execute(select(Reward.seat, Reward.value).where(Reward.name == "pick_correct")).all()
    assert picks == [("judge", 1.0)] * 4
    engine.dispose()


@pytest.mark.parametrize(("args", "expected"), [
    (["--variants", "plain,guess"], "unknown instruction variant(s) 'guess'"),
    (["--agents", "1"], "--agents must be between 2 and 16"),
    (["--agents", "2", "--variants", "plain,step-by-step,check-your-work"], "raise --agents to 3"),
    (["--seat", "critic=scripted:calculator"], "game 'ensemble' has no seat 'critic'; its seats: solver, judge"),
    (["--turns", "2"], "--turns: not an option of ensemble"),
])
def test_bad_input_is_refused_before_anything_is_played(url, args, expected):
    result = runner.invoke(app, ["play", "ensemble", "-n", "2", "--seat", "solver=scripted:calculator", *args])
    assert result.exit_code == 2 and expected in " ".join(result.output.split()), result.output
    engine = open_store(url)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Episode)).scalar() == 0
    engine.dispose()


def test_an_in_process_judge_picks_by_constrained_decoding(sums):
    """A tiny random model as the judge: whatever it writes, its last line is one of the
    offered picks, chosen token by token in the same decode."""
    from memory_sink import MemorySink

    tasks = load_tasks(str(sums), n=2, seed=0, split="train")

    def two_answers(messages, request) -> str:
        return BOTS["calculator"](messages, request) if _variant(messages) == "plain" else "Answer: 0"

    async def main():
        judge = InProcessBackend(tiny_model(tiny_tokenizer()), tiny_tokenizer(), model_name="tiny")
        try:
            policies = {"solver": Policy(ScriptedBackend.from_function(two_answers), SamplingParams(temperature=0)),
                        "judge": Policy(judge, SamplingParams(temperature=0, max_new_tokens=12))}
            return await play(ENSEMBLE, tasks, policies, sink, concurrency=2, seed=0,
                              options=ENSEMBLE.make_options({"agents": 3}))
        finally:
            await judge.aclose()

    sink = MemorySink()
    report = asyncio.run(main())
    assert [e.status for e in report.episodes] == ["succeeded"] * 2
    judged = [t for t in sink.turns if t.seat == "judge"]
    assert len(judged) == 2 and all(t.sampling["final_choice"]["constrained"] for t in judged)
    assert all(t.response.endswith(("Pick: 1", "Pick: 2")) and t.parsed_value is not None for t in judged)
    assert all(e.outcome["decided_by"] == "judge" for e in report.episodes)
