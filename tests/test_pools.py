"""Context seats filled per episode from a pool or a schedule, and the debate bots that make
useful non-stationary opponents; played through the real runner into real SQLite stores."""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace

import pytest
from factories import episode_start
from memory_sink import MemorySink
from sqlalchemy import select
from tiny_model import save_random_lora, save_tiny_model, tiny_model, tiny_tokenizer
from typer.testing import CliRunner

from app.cli import app
from app.seat_pools.resolve import RoundDraws, members, resolve
from app.seat_pools.spec import DrawnSeat, DrawSpec, DrawSpecError, EpisodePolicies, parse_draw
from app.settings import load_settings
from app.wiring import PolicyFactory
from graphs.episodes import play
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.registry import get_game, scripted_bot
from graphs.tasks.base import Task
from storage.engine import open_store
from storage.models import Run
from storage.queries import EpisodeFilter, get_episode, list_episodes
from storage.recorder import Recorder
from storage.records import EpisodeEnd, EpisodeStatus, JudgmentRecord
from training.deploy import LivePolicies
from training.registry import promote, publish, reject

DEBATE = get_game("debate")
SUMS = [Task(id=f"sum-{a}", question=f"What is {a} + 7?", answer=str(a + 7), source="test") for a in range(6)]


def debate_against(opponent: str, tasks: list[Task] = SUMS, rounds: int = 2) -> MemorySink:
    """Debates of the stubborn bot (A: right on every sum, and keeps its answer) against a scripted B."""
    sink = MemorySink()
    policies = {"debater_a": Policy(scripted_bot("stubborn")), "debater_b": Policy(scripted_bot(opponent))}
    asyncio.run(play(DEBATE, tasks, policies, sink, concurrency=2, seed=0,
                     options=DEBATE.make_options({"rounds": rounds})))
    return sink


# --- debate bots -----------------------------------------------------------------------------


def test_agreeable_adopts_the_other_answer_and_every_debate_is_a_tie():
    sink = debate_against("agreeable")
    b_answers = [t.parsed_value for t in sink.turns if t.seat == "debater_b"]
    a_answers = [t.parsed_value for t in sink.turns if t.seat == "debater_a"]
    assert b_answers == a_answers and len(b_answers) == 2 * len(SUMS)
    assert [j.winner_seat for j in sink.judgments] == [None] * len(SUMS)


def test_contrarian_disputes_a_right_answer_and_loses_every_debate():
    sink = debate_against("contrarian")
    for a_turn, b_turn in zip(*([t for t in sink.turns if t.seat == s] for s in ("debater_a", "debater_b")),
                              strict=True):
        assert b_turn.parsed_value == str(int(a_turn.parsed_value) + 1)
    assert [j.winner_seat for j in sink.judgments] == ["debater_a"] * len(SUMS)


def test_contrarian_states_its_own_calculation_against_a_wrong_answer():
    sink = MemorySink()
    policies = {"debater_a": Policy(scripted_bot("echo")), "debater_b": Policy(scripted_bot("contrarian"))}
    asyncio.run(play(DEBATE, SUMS[1:3], policies, sink, concurrency=1, seed=0,
                     options=DEBATE.make_options({"rounds": 1})))
    assert [t.parsed_value for t in sink.turns if t.seat == "debater_a"] == ["7", "7"]  # the echo's last number
    assert [t.parsed_value for t in sink.turns if t.seat == "debater_b"] == ["8", "9"]
    assert [j.winner_seat for j in sink.judgments] == ["debater_b", "debater_b"]


# --- specs -----------------------------------------------------------------------------------


def test_pool_and_schedule_specs_parse():
    assert parse_draw("model:base") is None and parse_draw("scripted:pool") is None
    assert parse_draw("pool:debater_a") == DrawSpec("pool", (), "debater_a", "uniform")
    assert parse_draw("pool:debater_a/lagged:2") == DrawSpec("pool", (), "debater_a", "lagged", 2)
    assert parse_draw("pool:scripted:stubborn,model:critic@v3/rated") == DrawSpec(
        "pool", ("scripted:stubborn", "model:critic@v3"), None, "rated")
    assert parse_draw("pool:openai:org/model-7b") == DrawSpec("pool", ("openai:org/model-7b",), None, "uniform")
    assert parse_draw("schedule:scripted:agreeable,scripted:contrarian/every:20") == DrawSpec(
        "schedule", ("scripted:agreeable", "scripted:contrarian"), None, "every", 20)
    assert parse_draw("schedule:model:base,scripted:stubborn/round").mode == "round"


@pytest.mark.parametrize(("spec", "says"), [
    ("pool:", "name a role or the members"),
    ("pool:debater_a/every:3", "a pool draws by uniform, latest, lagged:K, rated"),
    ("pool:debater_a/lagged", "K a whole number"),
    ("pool:pool:debater_a,scripted:echo", "cannot be a member"),
    ("schedule:scripted:agreeable,scripted:contrarian", "say when the schedule switches"),
    ("schedule:scripted:agreeable/every:5", "at least two policies"),
    ("schedule:scripted:agreeable,scripted:contrarian/every:0", "K >= 1"),
])
def test_a_spec_that_cannot_be_read_says_why(spec, says):
    with pytest.raises(DrawSpecError, match=re.escape(says)):
        parse_draw(spec)


# --- draws -----------------------------------------------------------------------------------


def labels(draws: EpisodePolicies, seeds: range, seat: str = "debater_b") -> list[str]:
    return [draws.for_episode(seed)[seat].label for seed in seeds]


def bots(*names: str) -> tuple[Policy, ...]:
    return tuple(Policy(scripted_bot(name)) for name in names)


def test_a_pool_draws_from_the_episode_seed_and_a_schedule_switches_every_k():
    fixed = {"debater_a": Policy(scripted_bot("stubborn"))}
    pool = DrawnSeat(parse_draw("pool:scripted:agreeable,scripted:contrarian"), bots("agreeable", "contrarian"))
    draws = EpisodePolicies(fixed, {"debater_b": pool}, first_seed=100)
    drawn = labels(draws, range(100, 140))
    assert drawn == labels(EpisodePolicies(fixed, {"debater_b": pool}, first_seed=100), range(100, 140))
    assert 10 < drawn.count("scripted:agreeable") < 30  # both drawn, about half each
    weighted = DrawnSeat(pool.spec, pool.members, weights=(0.0, 1.0))
    assert set(labels(EpisodePolicies(fixed, {"debater_b": weighted}, 100), range(100, 120))) == {"scripted:contrarian"}
    schedule = DrawnSeat(parse_draw("schedule:scripted:agreeable,scripted:contrarian,scripted:echo/every:2"),
                         bots("agreeable", "contrarian", "echo"))
    assert [label.removeprefix("scripted:") for label in labels(EpisodePolicies(fixed, {"debater_b": schedule}, 7),
                                                                 range(7, 15))] == [
        "agreeable", "agreeable", "contrarian", "contrarian", "echo", "echo", "agreeable", "agreeable"]
    by_round = DrawnSeat(parse_draw("schedule:scripted:agreeable,scripted:contrarian/round"),
                         bots("agreeable", "contrarian"), round_index=2)
    assert set(labels(EpisodePolicies(fixed, {"debater_b": by_round}, 0), range(5))) == {"scripted:contrarian"}
    assert draws()["debater_a"].label == "scripted:stubborn"  # the fixed seats, as the runner checks them


def test_the_runner_plays_each_episode_with_its_draw_whatever_the_concurrency():
    pool = DrawnSeat(parse_draw("pool:scripted:agreeable,scripted:contrarian"), bots("agreeable", "contrarian"))
    draws = EpisodePolicies({"debater_a": Policy(scripted_bot("stubborn"))}, {"debater_b": pool}, first_seed=50)
    played = {}
    for concurrency in (1, 4):
        sink = MemorySink()
        asyncio.run(play(DEBATE, SUMS, draws, sink, concurrency=concurrency, seed=50,
                         options=DEBATE.make_options({"rounds": 1})))
        played[concurrency] = {start.seed: start.seats["debater_b"] for start in sink.started}
        turns = {t.episode_id: t.policy for t in sink.turns if t.seat == "debater_b"}
        assert {start.id: start.seats["debater_b"] for start in sink.started} == turns
        winners = {start.seats["debater_b"]: set() for start in sink.started}
        seat_of = {start.id: start.seats["debater_b"] for start in sink.started}
        for judgment in sink.judgments:
            winners[seat_of[judgment.episode_id]].add(judgment.winner_seat)
        assert winners.get("scripted:contrarian", {"debater_a"}) == {"debater_a"}
        assert winners.get("scripted:agreeable", {None}) == {None}
    assert played[1] == played[4] == {seed: draws.for_episode(seed)["debater_b"].label for seed in range(50, 56)}
    assert len(set(played[1].values())) == 2


# --- through the CLI -------------------------------------------------------------------------

runner = CliRunner()


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'pools.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    return url


def invoke(*args: str):
    return runner.invoke(app, list(args))


def words(result) -> str:
    return " ".join(result.output.split())


def seats_by_seed(db: str, run_id: str) -> dict[int, str]:
    """debater_b's policy in each episode of the run, by the episode's seed."""
    engine = open_store(db)
    rows = list_episodes(engine, EpisodeFilter(run_id=run_id), sort="started_at", limit=1000).items
    return {row["seed"]: get_episode(engine, row["id"])["seats"]["debater_b"] for row in rows}


def test_play_switches_strategy_every_k_episodes_and_each_draw_is_queryable(db):
    schedule = "debater_b=schedule:scripted:agreeable,scripted:contrarian/every:3"
    result = invoke("play", "debate", "-n", "8", "-c", "3", "--seed", "10", "--seat", "debater_a=scripted:stubborn",
                    "--seat", schedule, "--format", "json")
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout.strip().splitlines()[-1])[0]["run_id"]
    drawn = seats_by_seed(db, run_id)
    assert [drawn[seed].removeprefix("scripted:") for seed in range(10, 18)] == [
        "agreeable", "agreeable", "agreeable", "contrarian", "contrarian", "contrarian", "agreeable", "agreeable"]
    listed = json.loads(invoke("episodes", "list", "--policy", "scripted:contrarian", "--format", "json").stdout)
    assert sorted(row["seed"] for row in listed) == [13, 14, 15]


def test_a_pool_draws_the_same_episodes_with_one_worker_or_two(db):
    pool = ["--seat", "debater_a=scripted:stubborn", "--seat",
            "debater_b=pool:scripted:agreeable,scripted:contrarian,scripted:echo"]
    runs = []
    for workers in ("1", "2"):
        result = invoke("play", "debate", "-n", "12", "--seed", "3", "--workers", workers, *pool, "--format", "json")
        assert result.exit_code == 0, result.output
        runs.append(json.loads(result.stdout.strip().splitlines()[-1])[0]["run_id"])
    one, two = (seats_by_seed(db, run) for run in runs)
    assert one == two and set(one) == set(range(3, 15)) and len(set(one.values())) == 3


@pytest.mark.parametrize(("seat", "says"), [
    ("debater_b=schedule:scripted:sneaky,scripted:agreeable/every:5",
     "(member 'scripted:sneaky'): unknown scripted bot; built-in bots: echo"),
    ("debater_b=pool:model:debater_a@v7,scripted:stubborn", "no adapter version is named 'debater_a@v7'"),
    ("debater_b=pool:critic/latest", "no adapter version of role 'critic' is registered and debate has no learner "
                                     "seat 'critic'"),
    ("referee=pool:scripted:stubborn,scripted:echo", "game 'debate' has no seat 'referee'"),
    ("debater_b=pool:scripted:stubborn,verifier", "'verifier' cannot be a member"),
    ("debater_b=schedule:scripted:agreeable,scripted:contrarian", "say when the schedule switches"),
])
def test_bad_pools_and_schedules_are_refused_before_anything_is_played(db, seat, says):
    result = invoke("play", "debate", "-n", "2", "--seat", "debater_a=scripted:stubborn", "--seat", seat)
    assert result.exit_code == 2, result.output
    assert says in words(result)
    assert json.loads(invoke("episodes", "list", "--format", "json").stdout) == []


def test_commands_that_play_fixed_policies_refuse_a_pool(db):
    result = invoke("eval", "--game", "debate", "-n", "2", "--seat", "debater_a=scripted:stubborn",
                    "--seat", "debater_b=pool:scripted:agreeable,scripted:contrarian")
    assert result.exit_code != 0
    assert "a pool or schedule changes policy from episode to episode" in words(result)


# --- a role's history, from a real registry (random LoRA adapters on a tiny model) -----------


@pytest.fixture
def lab(tmp_path, monkeypatch, db):
    """A tiny base model as SPARRING_MODEL and ``publish(status)``: a new debater_a version."""
    base = save_tiny_model(tmp_path / "tiny")
    model = tiny_model(tiny_tokenizer())
    model.config.name_or_path = str(base)
    lora = save_random_lora(model, tmp_path / "lora", seed=1)
    monkeypatch.setenv("SPARRING_MODEL", str(base))
    engine = open_store(db)

    def publish_version(status: str) -> str:
        record = publish(engine, role="debater_a", trained_dir=lora, adapters_root=tmp_path / "adapters",
                         base_model=str(base), trainer="sft", config={}, parent=None, dataset_snapshot_id=None,
                         metrics={})
        if status == "active":
            promote(engine, record.name, eval={})
        elif status == "rejected":
            reject(engine, record.name, eval={})
        return record.name

    return SimpleNamespace(engine=engine, base=str(base), publish=publish_version, db=db)


def factory_of(lab) -> PolicyFactory:
    return PolicyFactory(load_settings(), SamplingParams(temperature=0.0, max_new_tokens=4), lab.engine)


def test_a_role_history_is_the_base_then_every_promoted_version(lab):
    for status in ("active", "active", "rejected", "candidate"):
        lab.publish(status)
    assert members(lab.engine, DEBATE, "debater_b", parse_draw("pool:debater_a"), "pool:debater_a") == [
        "model:base", "model:debater_a@v1", "model:debater_a@v2"]

    async def adapters_of(spec: str) -> list[str | None]:
        factory = factory_of(lab)
        try:
            drawn = await resolve(factory, lab.engine, DEBATE, "debater_b", spec, {})
            return [member.adapter for member in drawn.members]
        finally:
            await factory.aclose()

    assert asyncio.run(adapters_of("pool:debater_a/latest")) == ["debater_a@v2"]
    assert asyncio.run(adapters_of("pool:debater_a/lagged:1")) == ["debater_a@v1"]
    assert asyncio.run(adapters_of("pool:debater_a/lagged:9")) == [None]  # shorter history: the oldest, the base
    assert asyncio.run(adapters_of("pool:debater_a")) == [None, "debater_a@v1", "debater_a@v2"]


def test_each_round_reads_the_history_again(lab):
    lab.publish("active")

    async def two_rounds() -> tuple[list[str], list[str]]:
        factory = factory_of(lab)
        try:
            live = LivePolicies({"debater_a": Policy(scripted_bot("stubborn"))})
            draws = RoundDraws(factory, lab.engine, DEBATE, {"debater_b": "pool:debater_a"})
            first = await draws(live, 1, 1000)
            lab.publish("active")
            second = await draws(live, 2, 2000)
            return ([p.label for p in first.drawn["debater_b"].members],
                    [p.label for p in second.drawn["debater_b"].members])
        finally:
            await factory.aclose()

    first, second = asyncio.run(two_rounds())
    assert first == [lab.base, f"{lab.base}+debater_a@v1"]
    assert second == [*first, f"{lab.base}+debater_a@v2"]


def test_a_rated_pool_favours_opponents_of_the_learner_strength(lab):
    lab.publish("active")
    lab.publish("active")
    v1, v2 = f"{lab.base}+debater_a@v1", f"{lab.base}+debater_a@v2"
    with Recorder(lab.engine) as recorder:  # v2 beats the base 12-0 and splits 6-6 with v1
        for i, (a, b, winner) in enumerate([(v2, lab.base, "debater_a")] * 12 + [(v2, v1, "debater_a")] * 6
                                           + [(v2, v1, "debater_b")] * 6):
            start = episode_start(game="debate", seats={"debater_a": a, "debater_b": b, "judge": "rules"},
                                  task_id=f"t{i}")
            recorder.episode_started(start)
            recorder.judgment(JudgmentRecord(start.id, "judge", "rules", winner,
                                             "debater_b" if winner == "debater_a" else "debater_a", None, None, "x"))
            recorder.episode_finished(EpisodeEnd(start.id, EpisodeStatus.SUCCEEDED, 1.0, 0, {}))

    async def weights() -> tuple[float, ...]:
        factory = factory_of(lab)
        try:
            learner = {"debater_a": await factory.policy("debater_a", "model:debater_a@v2")}
            drawn = await resolve(factory, lab.engine, DEBATE, "debater_b", "pool:debater_a/rated", learner)
            assert [m.adapter for m in drawn.members] == [None, "debater_a@v1", "debater_a@v2"]
            return drawn.weights
        finally:
            await factory.aclose()

    base, first, second = asyncio.run(weights())
    assert second == pytest.approx(0.25) and first > 0.2  # even matches
    assert base < first / 2  # the base it always beats comes far less often


def test_play_against_the_history_of_a_role_records_each_draw(lab):
    lab.publish("active")
    lab.publish("active")
    result = invoke("play", "debate", "-n", "9", "--max-new-tokens", "4", "--rounds", "1", "--seed", "0",
                    "--seat", "debater_a=scripted:stubborn", "--seat", "debater_b=pool:debater_a", "--format", "json")
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout.strip().splitlines()[-1])[0]["run_id"]
    drawn = seats_by_seed(lab.db, run_id)
    assert set(drawn.values()) == {lab.base, f"{lab.base}+debater_a@v1", f"{lab.base}+debater_a@v2"}
    listed = json.loads(invoke("episodes", "list", "--policy", "debater_a@v2", "--format", "json").stdout)
    assert sorted(row["seed"] for row in listed) == sorted(s for s, label in drawn.items() if label.endswith("@v2"))


def test_retrain_switches_a_round_schedule_each_round_and_evaluates_the_default(lab):
    result = invoke("retrain", "--game", "debate", "--roles", "debater_a", "--rounds", "2", "--every-episodes", "2",
                    "--samples", "1", "--eval-tasks", "2", "--max-new-tokens", "4",
                    "--seat", "debater_a=scripted:stubborn",
                    "--seat", "debater_b=schedule:scripted:agreeable,scripted:contrarian/round", "--format", "json")
    assert result.exit_code == 0, result.output
    with lab.engine.connect() as conn:
        runs = conn.execute(select(Run.id, Run.config).order_by(Run.started_at)).all()
    rounds = [run_id for run_id, config in runs if str(config.get("purpose", "")).startswith("retrain round")]
    evaluations = [run_id for run_id, config in runs if "evaluation" in config]
    assert [set(seats_by_seed(lab.db, run).values()) for run in rounds] == [{"scripted:agreeable"},
                                                                             {"scripted:contrarian"}]
    assert evaluations and all(set(seats_by_seed(lab.db, run).values()) == {lab.base} for run in evaluations)
