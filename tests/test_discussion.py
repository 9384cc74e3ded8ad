"""The discussion game: N agents answer, read each other's answers and answer again; only the
first N agent seats play; each agent seat may run its own base model. Played through the CLI
and the runner on real stores, rows built for an agent, metrics read back from the store."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter

import pytest
from model_logs import as_model_turns
from sqlalchemy import func, select
from tiny_model import save_tiny_model
from typer.testing import CliRunner

from app.cli import app
from app.settings import load_settings
from app.wiring import PolicyFactory, SeatSpecError, other_base_model, parse_seat_specs
from graphs.contract import GameContractError, GameSpec
from graphs.discussion import prompts
from graphs.discussion.state import AGENTS
from graphs.episodes import play
from graphs.judges.answers import extract_answer
from graphs.metrics.stats import wilson
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import BOTS, ScriptedBackend
from graphs.registry import get_game
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.models import Episode, EpisodePayload, Reward, Run, Turn, TurnPayload
from storage.recorder import Recorder
from storage.records import RunRecord
from training.datasets import build_snapshot, load_snapshot, turn_credits
from training.datasets.reading import ReadPlan, read_episodes

runner = CliRunner()
DISCUSSION = get_game("discussion")


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    """Two tiny random models saved as folders: two different base models."""
    return (save_tiny_model(tmp_path_factory.mktemp("tiny-a"), seed=0),
            save_tiny_model(tmp_path_factory.mktemp("tiny-b"), seed=1))


def follower(messages, request) -> str:
    """Wrong at first ('Answer: 0'); later, the answer most of the other agents gave."""
    if len(messages) == 1:
        return "Answer: 0"
    shown = messages[-1]["content"].split("The problem:")[0]
    answers = Counter(extract_answer(part) for part in shown.split(" answered:\n")[1:])
    return f"I follow the others.\nAnswer: {answers.most_common(1)[0][0]}"


def _episodes(url: str) -> int:
    engine = open_store(url)
    with engine.connect() as conn:
        count = conn.execute(select(func.count()).select_from(Episode)).scalar()
    engine.dispose()
    return count


def test_only_the_first_n_agent_seats_play():
    options = DISCUSSION.make_options({"agents": 3})
    assert [s.name for s in DISCUSSION.playing_seats(options)] == ["agent_1", "agent_2", "agent_3", "judge"]
    assert len(DISCUSSION.seats) == 6 and set(DISCUSSION.gate_metrics) == set(AGENTS)
    specs = parse_seat_specs(DISCUSSION, ["agent_2=scripted:calculator"], defaults={"agent_5": "scripted:echo"},
                             options=options)
    assert specs == {"agent_1": "model", "agent_2": "scripted:calculator", "agent_3": "model", "judge": "rules"}
    with pytest.raises(SeatSpecError, match=r"'agent_4=model': that seat does not play in discussion with 3 agents"):
        parse_seat_specs(DISCUSSION, ["agent_4=model"], defaults={}, options=options)
    with pytest.raises(GameContractError, match="seats_in_play names 'agent_9', which is not a seat"):
        GameSpec(**{**vars(DISCUSSION), "seats_in_play": lambda options: ("agent_9",)})
    # the runner needs policies for the playing seats only, and records only those on the episode
    with pytest.raises(ValueError, match=r"needs a policy for seat\(s\) agent_2$"):
        asyncio.run(play(DISCUSSION, [], {"agent_1": Policy(ScriptedBackend.from_function(follower))}, None,
                         concurrency=1, seed=0, options=DISCUSSION.make_options({"agents": 2})))


def test_specs_name_another_base_model_apart_from_adapters():
    assert [other_base_model(s) for s in ("model", "model:base", "model:agent_2@v3", "scripted:echo")] == [None] * 4
    assert other_base_model("model:HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert other_base_model("model:/models/smol@v2") == "/models/smol@v2"  # a path, even with '@v'


def test_play_via_the_cli_build_sft_rows_and_metrics(url, sums):
    out = runner.invoke(app, ["play", "discussion", "-n", "8", "--tasks", str(sums), "--split", "train",
                              "--agents", "3", "--rounds", "2", "--seat", "agent_1=scripted:calculator",
                              "--seat", "agent_2=scripted:always-incorrect", "--seat", "agent_3=scripted:calculator",
                              "--format", "json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)[0]
    assert summary["succeeded"] == 8
    assert (summary["round-1"], summary["round-2"], summary["discussion_gain"]) == (0.6667, 0.6667, 0.0)
    assert (summary["agent_2:final"], summary["agent_3:final"], summary["final_majority"]) == (0.0, 1.0, 1.0)
    assert "agent_4:final" not in summary

    engine = open_store(url)
    with engine.connect() as conn:
        turns = Counter(conn.execute(select(Turn.seat, Turn.round)).all())
        seats = conn.execute(select(EpisodePayload.seats)).scalars().first()
    assert turns == {(seat, r): 8 for seat in AGENTS[:3] for r in (0, 1)}
    assert seats == {"agent_1": "scripted:calculator", "agent_2": "scripted:always-incorrect",
                     "agent_3": "scripted:calculator", "judge": "rules"}

    as_model_turns(url, "agent_1")
    built = runner.invoke(app, ["datasets", "build", "sft", "--role", "agent_1", "--game", "discussion",
                                "--format", "json"])
    assert built.exit_code == 0, built.output
    snapshot = json.loads(built.stdout)[0]
    rows = list(load_snapshot(engine, snapshot["snapshot"], role="agent_1", base_model="bundled", kind="sft"))
    assert len(rows) == 16  # 8 tasks x 2 rounds, each round's prompt a state of its own
    later = [r["prompt"] for r in rows if len(r["prompt"]) == 3]
    assert len(later) == 8 and all(p[1]["role"] == "assistant" for p in later)
    assert all("Agent 2 answered:" in p[2]["content"] and "Agent 1 answered" not in p[2]["content"] for p in later)

    metrics = DISCUSSION.metrics(engine, summary["run_id"]).metrics
    assert metrics["agent_1:round-1"] == metrics["agent_1:final"] == wilson(8, 8)
    assert metrics["agent_2:round-2"] == wilson(0, 8) and metrics["round-1"].n == 8
    engine.dispose()


def test_a_right_answer_that_moves_another_agent_earns_the_bonus(store_url, sums, tmp_path):
    engine = open_store(store_url)
    tasks = load_tasks(str(sums), n=8, seed=0, split="train")
    calculator = Policy(ScriptedBackend.from_function(BOTS["calculator"]), SamplingParams(temperature=0))
    policies = {"agent_1": calculator, "agent_2": Policy(ScriptedBackend.from_function(follower)),
                "agent_3": calculator}
    run = RunRecord.new("discussion", {}, 0)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        report = asyncio.run(play(DISCUSSION, tasks, policies, recorder, concurrency=4, seed=0, run_id=run.id,
                                  options=DISCUSSION.make_options({"agents": 3, "rounds": 3, "move_bonus": 0.5})))
    assert [e.status for e in report.episodes] == ["succeeded"] * 8
    assert report.episodes[0].outcome["correct_by_round"] == [[True, False, True], [True, True, True]] + [[True] * 3]
    assert all(e.reward == 1.0 for e in report.episodes)

    metrics = DISCUSSION.metrics(engine, run.id)
    assert metrics.metrics["round-1"].value == pytest.approx(2 / 3) and metrics.metrics["round-3"].value == 1.0
    gain = metrics.metrics["discussion_gain"]
    assert gain.value == pytest.approx(1 / 3) and gain.n == 8 and gain.low == pytest.approx(1 / 3)
    assert metrics.per_task["discussion_gain"] == {t.id: pytest.approx(1 / 3) for t in tasks}
    assert metrics.metrics["wrong->right"].value == pytest.approx(1 / 3)
    assert metrics.metrics["agent_2:round-1"] == wilson(0, 8) and metrics.metrics["agent_2:final"] == wilson(8, 8)

    with engine.connect() as conn:
        bonuses = conn.execute(select(Reward.seat, Reward.value, Reward.info).where(Reward.name == "move_bonus")).all()
    assert Counter(seat for seat, _, _ in bonuses) == {"agent_1": 8, "agent_3": 8}
    assert all(value == 0.5 and info["moved"] == ["agent_2"] and info["round"] == 0 for _, value, info in bonuses)

    as_model_turns(store_url, "agent_1")
    credits = Counter()
    for episode in read_episodes(engine, ReadPlan(game="discussion", role="agent_1")):
        for turn in episode.turns:
            if turn.selected:
                credits[(turn.round, turn_credits(episode, "agent_1")[turn.turn_id])] += 1
    assert credits == {(0, 1.5): 8, (1, 1.0): 8, (2, 1.0): 8}  # its own correctness, plus the move it caused
    ppo = build_snapshot(engine, "ppo", "agent_1", game="discussion", base_model="bundled", out_dir=tmp_path / "ppo")
    rows = list(load_snapshot(engine, ppo.id, role="agent_1", base_model="bundled", kind="ppo"))
    assert sorted(r["reward"] for r in rows) == [1.0] * 16 + [1.5] * 8
    engine.dispose()


def test_an_agent_seat_plays_another_base_model(url, sums, tiny_dirs, monkeypatch):
    """agent_1 plays the configured base model, agent_2 and agent_3 another one (one backend)."""
    main, other = tiny_dirs
    monkeypatch.setenv("SPARRING_MODEL", str(main))
    monkeypatch.setenv("SPARRING_DEVICE", "cpu")
    out = runner.invoke(app, ["play", "discussion", "-n", "2", "--tasks", str(sums), "--agents", "3",
                              "--seat", "agent_1=model:base", "--seat", f"agent_2=model:{other}",
                              "--seat", f"agent_3=model:{other}", "--max-new-tokens", "8", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)[0]["succeeded"] == 2
    engine = open_store(url)
    with engine.connect() as conn:
        served = Counter(conn.execute(select(Turn.seat, Turn.served_by, Turn.backend)).all())
    engine.dispose()
    assert served == {("agent_1", str(main), "inprocess"): 4, ("agent_2", str(other), "inprocess"): 4,
                      ("agent_3", str(other), "inprocess"): 4}

    async def backends():
        factory = PolicyFactory(load_settings(model=str(main), device="cpu"), SamplingParams())
        try:
            policies = await factory.policies({"agent_1": "model:base", "agent_2": f"model:{other}",
                                               "agent_3": f"model:{other}", "agent_4": f"model:{main}"})
            return policies, len(factory.backends)
        finally:
            await factory.aclose()

    policies, loaded = asyncio.run(backends())
    assert policies["agent_2"].backend is policies["agent_3"].backend is not policies["agent_1"].backend
    assert policies["agent_4"].backend is policies["agent_1"].backend and loaded == 2


@pytest.mark.parametrize(("args", "expected", "code"), [
    (["--agents", "6"], "--agents must be between 2 and 5", 2),
    (["--agents", "1"], "--agents must be between 2 and 5", 2),
    (["--rounds", "0"], "--rounds must be >= 1", 2),
    (["--agents", "2", "--seat", "agent_3=scripted:calculator"],
     "'agent_3=scripted:calculator': that seat does not play in discussion with 2 agents", 2),
    (["--seat", "agent_9=scripted:calculator"], "game 'discussion' has no seat 'agent_9'", 2),
    (["--seat", "judge=model"], "the judge seat of discussion is a rules judge", 2),
    (["--seat", "agent_2=model:/no/such/model"], "Model folder /no/such/model does not exist", 2),
    (["--variants", "plain"], "--variants: not an option of discussion", 2),
])
def test_bad_input_is_refused_before_anything_is_played(url, args, expected, code):
    seats = ["--seat", "agent_1=scripted:calculator", "--seat", "agent_2=scripted:calculator"]
    result = runner.invoke(app, ["play", "discussion", "-n", "2", *seats, *args])
    assert result.exit_code == code and expected in " ".join(result.output.split()), result.output
    assert _episodes(url) == 0


@pytest.mark.parametrize("command", [["eval", "--game", "discussion", "-n", "2"],
                                     ["retrain", "--game", "discussion", "--once"]])
def test_eval_and_retrain_refuse_a_seat_that_does_not_play(url, command):
    result = runner.invoke(app, [*command, "--agents", "2", "--seat", "agent_3=scripted:calculator"])
    assert result.exit_code == 2, result.output
    assert "that seat does not play in discussion with 2 agents" in " ".join(result.output.split())
    assert _episodes(url) == 0


def test_a_base_model_that_cannot_be_loaded_stops_the_run_before_any_episode(url, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    result = runner.invoke(app, ["play", "discussion", "-n", "2", "--agents", "2", "--seat",
                                 "agent_1=scripted:calculator", "--seat", f"agent_2=model:{broken}"])
    message = " ".join(result.output.split())
    # (the folder's long path may be folded anywhere by the console)
    assert result.exit_code == 1 and "seat agent_2 (model:" in message and "cannot load its base model" in message
    assert _episodes(url) == 0
    engine = open_store(url)
    with engine.connect() as conn:
        assert conn.execute(select(Run.status)).scalars().all() == ["failed"]
    engine.dispose()


def test_prompts_show_the_others_and_restate_the_problem():
    answers = [{"seat": s, "round": 0, "turn_id": s, "text": f"Answer: {i}", "value": str(i), "correct": None}
               for i, s in enumerate(AGENTS[:3])]
    messages = prompts.agent_messages("What is 2 + 2?", "agent_2", answers, 1)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"] and messages[1]["content"] == "Answer: 1"
    assert "Agent 1 answered:\nAnswer: 0" in messages[2]["content"] and "Agent 2 answered" not in messages[2]["content"]
    assert messages[2]["content"].endswith(f"The problem: What is 2 + 2?\n{prompts.ANSWER_FORMAT}")


@pytest.mark.slow
def test_ensemble_and_discussion_on_the_bundled_model(tmp_path, monkeypatch):
    """Both games through `sparring play` on the real bundled model (the ensemble with a judge
    model), checked in the store: every turn served in-process with its tokens, every answer
    checked, the judge's pick chosen by constrained decoding, the metrics with their samples."""
    url = f"sqlite:///{tmp_path / 'crowd.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    sampling = ["--max-new-tokens", "16", "--temperature", "1.0", "--format", "json"]
    summaries = {}
    for game, options in (("ensemble", ["--agents", "3", "--seat", "judge=model"]),
                          ("discussion", ["--agents", "3", "--rounds", "2"])):
        result = runner.invoke(app, ["play", game, "-n", "2", "-c", "2", *options, *sampling])
        assert result.exit_code == 0, result.output
        summaries[game] = json.loads(result.stdout)[0]
        assert summaries[game]["succeeded"] == 2 and summaries[game]["generated_tokens"] > 0

    engine = open_store(url)
    with engine.connect() as conn:
        turns = conn.execute(select(Turn.id, Turn.seat, Turn.served_by, Turn.backend, Turn.completion_tokens)).all()
        correct = dict(conn.execute(select(Reward.turn_id, Reward.value).where(Reward.name == "correct")).all())
        picks = dict(conn.execute(select(Turn.id, TurnPayload.response).join(TurnPayload)
                                  .where(Turn.seat == "judge")).all())
        pick_rewards = conn.execute(select(Reward.turn_id).where(Reward.name == "pick_correct")).scalars().all()
    assert Counter(t.seat for t in turns if t.seat != "judge") == {"solver": 6, **{s: 4 for s in AGENTS[:3]}}
    assert all(t.served_by == "bundled" and t.backend == "inprocess" and 0 < t.completion_tokens for t in turns)
    assert {t.id for t in turns if t.seat != "judge"} == set(correct) and set(correct.values()) <= {0.0, 1.0}
    assert sorted(picks) == sorted(pick_rewards)  # the judge spoke only where the agents disagreed
    assert all(re.search(r"(^|\n)Pick: [1-3]$", response) for response in picks.values()), picks
    for game, first in (("ensemble", "solver_accuracy"), ("discussion", "round-1")):
        metrics = get_game(game).metrics(engine, summaries[game]["run_id"]).metrics
        assert metrics[first].n == 2 and metrics[first].low is not None
    gain = get_game("discussion").metrics(engine, summaries["discussion"]["run_id"]).metrics["discussion_gain"]
    assert gain.n == 2 and gain.low <= gain.value <= gain.high
    engine.dispose()
