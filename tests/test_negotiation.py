"""negotiation: pools and the deal's scores, moves and the rules, the scripted counterparts,
the task source, and the game played, logged, measured, built into datasets and judged (rules
and a judge model), through the runner and the CLI; one test on the bundled model."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_calls import cli, refused
from game_runs import play_one_run
from memory_sink import MemorySink
from model_logs import as_model_turns
from sqlalchemy import select
from unconstrained import UnconstrainedBackend

from graphs.episodes import play
from graphs.negotiation import credit
from graphs.negotiation.bots import BOTS as NEGOTIATORS
from graphs.negotiation.game import GAME
from graphs.negotiation.pool import Move, Pool, parse_move, score_deal
from graphs.negotiation.prompts import negotiator_messages
from graphs.negotiation.rules import check_move, standing_offer
from graphs.negotiation.state import MoveRecord
from graphs.negotiation.tasks import load_negotiation_tasks
from graphs.policies.base import (
    BackendError,
    GenerationRequest,
    SamplingParams,
)
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import scripted_bot
from graphs.tasks.base import TaskSourceError
from storage.engine import open_store
from storage.models import Judgment, Turn
from training.datasets import build_snapshot, load_snapshot

POOL = Pool(("books", "hats", "balls"), (2, 1, 3), (3, 4, 0), (1, 2, 2))
"""Worked by hand: the proposer's take (a, b, c) is worth 3a + 4b to it and 10 - a - 2b - 2c to
the counterpart; the best Nash product is 10 * 6 = 60 at (2, 1, 0), also the best joint value 16."""


def request() -> GenerationRequest:
    return GenerationRequest(messages=[])


def record(seat: str, take: tuple[int, ...] | None, *, accept: bool = False, valid: bool = True) -> MoveRecord:
    return MoveRecord(seat=seat, turn_id=f"t-{seat}", text="", line=None, take=None if take is None else list(take),
                      accept=accept, valid=valid, coherent=valid, problem=None)


# --- pools, deals, moves and rules ----------------------------------------------------------


def test_a_deal_is_scored_against_every_split_of_the_pool() -> None:
    assert (POOL.best_nash, POOL.best_joint, len(POOL.splits)) == (60, 16, 24)
    even = score_deal(POOL, (1, 1, 0))  # 7 to each
    assert even.worth == {"proposer": 7, "counterpart": 7} and even.share == {"proposer": 0.7, "counterpart": 0.7}
    assert (even.nash_ratio, even.pareto_share, even.pareto_optimal) == (49 / 60, 14 / 16, True)
    wasteful = score_deal(POOL, (1, 1, 1))  # the proposer takes a ball it does not value
    assert wasteful.worth == {"proposer": 7, "counterpart": 5} and not wasteful.pareto_optimal
    best = score_deal(POOL, (2, 1, 0))
    assert (best.nash_ratio, best.pareto_share, best.pareto_optimal) == (1.0, 1.0, True)
    none = score_deal(POOL, None)
    assert (none.share, none.nash_ratio, none.pareto_share) == ({"proposer": 0.0, "counterpart": 0.0}, 0.0, 0.0)


@pytest.mark.parametrize(("text", "expected"), [
    ("Fair enough.\nMove: Propose books=1 hats=0 balls=2", Move((1, 0, 2))),
    ("Propose: balls=2, books=1, hats=0.", Move((1, 0, 2))),
    ("I will not accept that.\nMove: Propose books=2 hats=1 balls=0", Move((2, 1, 0))),
    ("Propose books=1 hats=1 balls=1? No...\nAccept", Move(None)),
    ("**Accept**", Move(None)),
    ("Propose books=7 hats=0 balls=0", Move((7, 0, 0))),  # parsed; the rules call it invalid
    ("I accept your kind words.", None),
    ("Propose books=1 hats=0", None),
    ("Propose books=1 hats=0 balls=1 hats=1", None),
    ("Let us talk.", None),
])
def test_the_last_move_line_is_parsed(text: str, expected: Move | None) -> None:
    assert parse_move(text, POOL) == expected


def test_the_rules_judge_validity_and_coherence() -> None:
    assert check_move(POOL, "proposer", Move(None), []).problem == (
        "accepts, but no proposal of the other side is standing")
    assert not check_move(POOL, "proposer", None, []).valid
    beyond = check_move(POOL, "proposer", Move((3, 0, 0)), [])
    assert not beyond.valid and "beyond the pool" in beyond.problem
    opening = [record("proposer", (2, 1, 0))]  # worth 10 to the proposer
    assert standing_offer(opening, "counterpart") == opening[0] and standing_offer(opening, "proposer") is None
    assert check_move(POOL, "counterpart", Move(None), opening).coherent
    countered = [*opening, record("counterpart", (1, 0, 3))]  # leaves the proposer (1, 1, 0): worth 7
    conceding = check_move(POOL, "proposer", Move((1, 1, 1)), countered)  # worth 7: a concession
    assert conceding.valid and conceding.coherent
    retracted = check_move(POOL, "proposer", Move((2, 1, 0)), [*countered, record("proposer", (1, 1, 1))])
    assert retracted.valid and not retracted.coherent and "concession taken back" in retracted.problem
    below = check_move(POOL, "proposer", Move((2, 0, 0)), countered)  # worth 6 < the 7 offered
    assert below.valid and not below.coherent and "turns down an offer worth 7" in below.problem
    # an invalid move counters nothing: the counterpart's proposal still stands for the proposer
    after_invalid = [*countered, record("proposer", None, valid=False), record("counterpart", None, valid=False)]
    assert standing_offer(after_invalid, "proposer") == countered[1]


def test_the_proposer_credit_is_its_value_share_less_one_for_an_incoherent_move() -> None:
    @dataclass
    class Logged:
        turn_id: str
        idx: int
        seat: str
        selected: bool
        rewards: dict[str, float]

    turns = [Logged("a", 0, "proposer", True, {credit.COHERENT: 1.0}),
             Logged("b", 1, "counterpart", False, {credit.COHERENT: 1.0, credit.VALUE_SHARE: 0.3}),
             Logged("c", 2, "proposer", True, {credit.COHERENT: 0.0, credit.VALUE_SHARE: 0.6})]
    assert credit.negotiator_credits(turns, "proposer") == {"a": 0.6, "c": pytest.approx(-0.4)}
    assert credit.negotiator_credits(turns[:1], "proposer") == {}  # no outcome logged: no credit


# --- scripted counterparts ------------------------------------------------------------------


def test_each_bot_holds_out_for_its_target_and_accepts_what_reaches_it() -> None:
    first = negotiator_messages(POOL, "counterpart", [record("proposer", (1, 1, 0))], 6)  # offers it 7 of 10
    replies = {name: bot(first, request()) for name, bot in NEGOTIATORS.items()}
    assert replies["fair"].endswith("Move: Accept")  # 7 >= half
    # it values every item: the whole pool's worth (10) is the whole pool
    assert replies["tough"].endswith("Move: Propose books=2 hats=1 balls=3")
    assert replies["conceding"].endswith("Move: Propose books=2 hats=1 balls=3")

    def answer(bot: str, offers: int) -> str:
        """The bot's move after ``offers`` proposals leaving it (0, 0, 1), worth 2, and its own
        ``offers - 1`` moves."""
        moves = [record("proposer" if i % 2 == 0 else "counterpart", (2, 1, 2) if i % 2 == 0 else (0, 0, 3))
                 for i in range(2 * offers - 1)]
        return NEGOTIATORS[bot](negotiator_messages(POOL, "counterpart", moves, 10), request())

    # its third move: conceding holds out for 60% (6: the cheapest take worth it, fewest items first),
    # tough for 80% (8); at its fifth, conceding is down to 20% and accepts 2, tough does not
    assert answer("conceding", 3).endswith("Move: Propose books=0 hats=0 balls=3")
    assert answer("tough", 3).endswith("Move: Propose books=0 hats=1 balls=3")
    assert answer("conceding", 5).endswith("Move: Accept")
    assert answer("tough", 5).endswith("Move: Propose books=0 hats=1 balls=3")
    with pytest.raises(BackendError, match="'Pool:'"):
        NEGOTIATORS["fair"]([{"role": "user", "content": "What is 2 + 2?"}], request())


def test_every_pairing_of_bots_is_coherent_and_each_keeps_its_floor() -> None:
    tasks = load_negotiation_tasks("negotiation", n=16, seed=0, split="train")
    agreements = {}
    for proposer in NEGOTIATORS:
        for counterpart in NEGOTIATORS:
            sink = MemorySink()
            policies = {"proposer": Policy(scripted_bot(proposer)), "counterpart": Policy(scripted_bot(counterpart))}
            report = asyncio.run(play(GAME, tasks, policies, sink, concurrency=4, seed=0,
                                      options=GAME.make_options({})))
            assert {e.status for e in report.episodes} == {"succeeded"}
            assert {r.value for r in sink.rewards if r.name == credit.COHERENT} == {1.0}
            agreed = [e.outcome["value_share"]["counterpart"] for e in report.episodes if e.outcome["agreement"]]
            floor = {"tough": 0.8, "fair": 0.5, "conceding": 0.2}[counterpart]
            assert all(s >= floor for s in agreed), (proposer, counterpart, agreed)
            agreements[proposer, counterpart] = len(agreed)
    assert agreements["fair", "fair"] > agreements["fair", "tough"] > 0
    assert agreements["conceding", "conceding"] > agreements["tough", "tough"]


# --- tasks ----------------------------------------------------------------------------------


def test_generated_pools_are_fixed_split_and_worth_ten_to_each_side() -> None:
    train = load_negotiation_tasks("negotiation", n=60, seed=0)
    heldout = load_negotiation_tasks("negotiation", n=60, seed=0, split="heldout")
    assert {t.split for t in train} == {"train"} and {t.split for t in heldout} == {"heldout"}
    assert not {t.question for t in train} & {t.question for t in heldout}
    assert len({t.question for t in train}) == 60
    assert {t.id for t in load_negotiation_tasks("negotiation", n=60, seed=5)} == {t.id for t in train}
    assert [t.id for t in load_negotiation_tasks("negotiation", n=60, seed=0)] == [t.id for t in train]
    for task in train:
        pool = Pool.from_meta(task.meta)
        assert pool.total("proposer") == pool.total("counterpart") == 10
        assert all(1 <= c <= 4 for c in pool.counts) and pool.best_nash > 0
        assert any(p and c for p, c in zip(pool.proposer_values, pool.counterpart_values, strict=True))


def test_a_pool_file_loads_and_a_bad_one_names_line_and_fix(tmp_path: Path) -> None:
    good = tmp_path / "pools.jsonl"
    good.write_text(json.dumps({"id": "p1", "counts": [2, 1, 3], "proposer_values": [3, 4, 0],
                                "counterpart_values": [1, 2, 2]}) + "\n\n"
                    + json.dumps({"items": ["apples", "pears"], "counts": [1, 4], "proposer_values": [2, 2],
                                  "counterpart_values": [6, 1]}) + "\n")
    tasks = sorted(load_negotiation_tasks(str(good), n=None, seed=0), key=lambda t: t.id)
    assert [t.id for t in tasks] == ["p1", "pools.jsonl:3"] and {t.split for t in tasks} == {"eval"}
    assert Pool.from_meta(tasks[0].meta) == POOL
    assert Pool.from_meta(tasks[1].meta).items == ("apples", "pears")

    def refused(line: str) -> str:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({"counts": [1, 1, 1], "proposer_values": [5, 5, 0],
                                   "counterpart_values": [0, 5, 5]}) + "\n" + line + "\n")
        with pytest.raises(TaskSourceError) as caught:
            load_negotiation_tasks(str(bad), n=None, seed=0)
        assert str(caught.value).startswith("bad.jsonl:2: ")
        return str(caught.value)

    assert "missing 'counts'" in refused(json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}))
    assert "not valid JSON" in refused("{counts: [1]}")
    assert "has 2 numbers but the pool has 3" in refused(json.dumps(
        {"counts": [1, 1, 1], "proposer_values": [5, 5], "counterpart_values": [5, 5, 0]}))
    assert "each count must be 1-9" in refused(json.dumps(
        {"counts": [0, 1, 1], "proposer_values": [5, 5, 5], "counterpart_values": [5, 5, 0]}))
    assert "no split gives both sides value" in refused(json.dumps(
        {"counts": [1, 1, 1], "proposer_values": [10, 0, 0], "counterpart_values": [10, 0, 0]}))
    assert "must be non-negative" in refused(json.dumps(
        {"counts": [1, 1, 1], "proposer_values": [0, 0, 0], "counterpart_values": [5, 5, 0]}))
    with pytest.raises(TaskSourceError, match="accepted: 'negotiation'"):
        load_negotiation_tasks("arithmetic", n=2, seed=0)
    with pytest.raises(TaskSourceError, match="have the splits train, heldout"):
        load_negotiation_tasks("negotiation", n=2, seed=0, split="eval")


# --- played, logged, measured and built -----------------------------------------------------


def two_minds(messages, request) -> str:
    """A proposer that plays tough on a task's first sample and fair on its second: siblings of
    one first state that end differently (a preference pair)."""
    own = [m["content"] for m in messages if m["role"] == "assistant"]
    if own:
        name = "tough" if own[0].startswith("I need most") else "fair"
    else:
        if request.choice is None:  # a constrained move asks twice: count the free request only
            two_minds.seen[messages[0]["content"]] += 1
        name = "tough" if two_minds.seen[messages[0]["content"]] % 2 else "fair"
    return NEGOTIATORS[name](messages, request)


def babbler(messages, request) -> str:
    """A proposer that writes no move line on its first move, then plays fair."""
    if not any(m["role"] == "assistant" for m in messages):
        return "Hello! Let us get to know each other."
    return NEGOTIATORS["fair"](messages, request)


def _play(url: str, tasks, policies: dict[str, Policy], **options):
    """Play into the store at ``url`` as one run; returns the engine, the report and the run id."""
    engine = open_store(url)
    report, run_id = play_one_run(engine, GAME, tasks, policies, **options)
    return engine, report, run_id


def test_played_logged_measured_and_built_into_every_kind_that_applies(store_url: str, tmp_path: Path) -> None:
    tasks = [t for t in load_negotiation_tasks("negotiation", n=10, seed=0, split="train") for _ in range(2)]
    two_minds.seen = Counter()
    policies = {"proposer": Policy(ScriptedBackend.from_function(two_minds)),
                "counterpart": Policy(scripted_bot("fair"))}
    engine, report, run_id = _play(store_url, tasks, policies)
    assert report.count("succeeded") == 20
    with engine.connect() as conn:
        judged = Counter(conn.execute(select(Judgment.rubric, Judgment.scored_seat, Judgment.judge_policy)))
    assert judged == {("fairness", None, "rules"): 20, ("coherence", "proposer", "rules"): 20,
                      ("coherence", "counterpart", "rules"): 20}

    metrics = GAME.metrics(engine, run_id)
    shares = {e.episode_id: e.reward for e in report.episodes}
    expected = _per_task_mean(report, lambda e: e.reward)
    own = metrics.metrics["own_value_share"]
    assert own.n == 10 and own.value == pytest.approx(expected) and own.low <= own.value <= own.high
    for name, key in (("agreement_rate", "agreement"), ("fairness", "fairness"), ("pareto_share", "pareto_share")):
        assert metrics.metrics[name].value == pytest.approx(_per_task_mean(report, lambda e: e.outcome[key])), name
    assert metrics.metrics["invalid_move_rate"].value == 0.0 and metrics.metrics["coherence"].value == 1.0
    assert "judge_coherence" not in metrics.metrics

    as_model_turns(store_url, "proposer")
    rows = {}
    for kind in ("sft", "dpo", "kto", "ppo"):
        built = build_snapshot(engine, kind, "proposer", game="negotiation", base_model="bundled",
                               out_dir=tmp_path / kind)
        rows[kind] = list(load_snapshot(engine, built.id, role="proposer", base_model="bundled", kind=kind))
        assert rows[kind], kind
    assert all(r["reward"] == shares[r["episode_id"]] for r in rows["ppo"])  # coherent moves: the share
    assert all(r["reward"] >= 0.5 for r in rows["sft"])
    assert {r["pair_kind"] for r in rows["dpo"]} == {"group"}
    assert all(r["chosen_reward"] > r["rejected_reward"] for r in rows["dpo"])
    assert all(r["prompt"][0]["content"].startswith("You are negotiating") for kind in rows for r in rows[kind])


def test_invalid_moves_are_measured_and_cost_credit(store_url: str, tmp_path: Path) -> None:
    tasks = load_negotiation_tasks("negotiation", n=6, seed=1, split="train")
    policies = {"proposer": Policy(ScriptedBackend.from_function(babbler)),
                "counterpart": Policy(scripted_bot("tough"))}
    engine, report, run_id = _play(store_url, tasks, policies, constrain_moves=False, max_turns=4)
    moves = [m for e in report.episodes for m in e.outcome["moves"][::2]]  # the proposer's: moves 1, 3
    assert len(moves) == 12 and moves.count(None) == 6
    rate = GAME.metrics(engine, run_id).metrics["invalid_move_rate"]
    assert (rate.value, rate.n) == (0.5, 12)
    as_model_turns(store_url, "proposer")
    built = build_snapshot(engine, "ppo", "proposer", game="negotiation", base_model="bundled", out_dir=tmp_path)
    rows = list(load_snapshot(engine, built.id, role="proposer", base_model="bundled", kind="ppo"))
    shares = {e.episode_id: e.reward for e in report.episodes}
    babbled = [r for r in rows if r["completion"][0]["content"].startswith("Hello")]
    assert len(babbled) == 6 and all(r["reward"] == shares[r["episode_id"]] - 1 for r in babbled)


def test_a_judge_model_scores_the_proposers_coherence_and_a_nonsense_one_fails_only_its_episode(
        store_url: str) -> None:
    tasks = load_negotiation_tasks("negotiation", n=4, seed=0, split="heldout")
    first = Pool.from_meta(tasks[0].meta)
    odd_pool = (f"Pool: {first.describe(first.counts)}\nAgent A's private values: "
                f"{first.describe(first.proposer_values)}\nAgent B's private values: "
                f"{first.describe(first.counterpart_values)}")

    def judge(messages, request) -> str:
        return "I cannot tell." if odd_pool in messages[-1]["content"] else "Consistent throughout.\nScore: 4"

    policies = {"proposer": Policy(scripted_bot("conceding")), "counterpart": Policy(scripted_bot("fair")),
                "judge": Policy(UnconstrainedBackend(judge, bot_name="rubric-judge"), SamplingParams(temperature=0))}
    engine, report, run_id = _play(store_url, tasks, policies)
    failed = [e for e in report.episodes if e.status == "failed"]
    assert len(failed) == 1 and failed[0].task_id == tasks[0].id
    assert "JudgeError" in failed[0].error and "Score: 1..5" in failed[0].error
    assert [e.outcome["judge_coherence"] for e in report.episodes if e.status == "succeeded"] == [0.75] * 3
    with engine.connect() as conn:
        scores = list(conn.execute(select(Judgment.score).where(Judgment.judge_policy == "scripted:rubric-judge",
                                                                Judgment.rubric == "coherence",
                                                                Judgment.scored_seat == "proposer")))
    assert [s for (s,) in scores] == [0.75] * 3
    judged = GAME.metrics(engine, run_id).metrics["judge_coherence"]
    assert (judged.value, judged.n) == (0.75, 3)


def _per_task_mean(report, value) -> float:
    per_task: dict[str, list[float]] = {}
    for e in report.episodes:
        if e.status == "succeeded":
            per_task.setdefault(e.task_id, []).append(float(value(e)))
    return sum(sum(v) / len(v) for v in per_task.values()) / len(per_task)


# --- through the CLI ------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'nego.db'}")
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    return tmp_path


def test_played_built_and_evaluated_from_the_cli_with_scripted_seats(env: Path) -> None:
    out = cli("play", "negotiation", "-n", "8", "--samples", "2", "--seat", "proposer=scripted:tough",
              "--seat", "counterpart=scripted:conceding", "--format", "json")
    played = json.loads(out.strip().splitlines()[-1])[0]
    assert (played["succeeded"], played["coherence"], played["invalid_move_rate"]) == (8, 1.0, 0.0)
    as_model_turns(f"sqlite:///{env / 'nego.db'}", "proposer")
    for kind in ("sft", "ppo", "kto"):
        built = json.loads(cli("datasets", "build", kind, "--role", "proposer", "--game", "negotiation",
                               "--format", "json"))[0]
        assert built["rows"] > 0, (kind, built)

    metrics = {m["metric"]: m for m in json.loads(cli(
        "eval", "--game", "negotiation", "-n", "6", "--seat", "proposer=scripted:fair", "--no-constrain-moves",
        "--max-turns", "4", "--format", "json"))}
    assert set(metrics) == {"agreement_rate", "own_value_share", "counterpart_value_share", "fairness",
                            "pareto_share", "coherence", "invalid_move_rate"}
    assert all(m["n"] == 6 and m["low"] <= m["value"] <= m["high"] for name, m in metrics.items()
               if name != "invalid_move_rate")
    assert metrics["invalid_move_rate"]["n"] >= 6 and metrics["coherence"]["value"] == 1.0


def test_bad_input_is_refused_with_the_fix(env: Path) -> None:
    assert "--rounds: not an option of negotiation (its options: --max-turns, --constrain-moves)" in refused(
        "play", "negotiation", "--rounds", "2")
    assert "max_turns must be >= 2" in refused("play", "negotiation", "--max-turns", "1")
    bad = env / "gsm8k.jsonl"
    bad.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    assert "gsm8k.jsonl:1: not a negotiation pool: missing 'counts'" in refused(
        "play", "negotiation", "--tasks", str(bad))
    assert "tough, fair, conceding" in refused("play", "negotiation", "--seat", "counterpart=scripted:bully")


@pytest.mark.slow
def test_retrain_trains_and_gates_the_proposer_on_a_tiny_model(env: Path, monkeypatch) -> None:
    """The tiny random model's constrained moves are valid, and some reach a deal worth half the
    pool to it against the fair bot: SFT rows from its own episodes, a candidate, a gate."""
    from tiny_model import save_tiny_model

    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(env / "tiny")))
    out = cli("retrain", "--game", "negotiation", "--roles", "proposer", "--once", "--practice", "0",
              "--every-episodes", "32", "--samples", "2", "--eval-tasks", "4", "--max-new-tokens", "4",
              "--max-steps", "1", "--format", "json")
    (round_,), report = (json.loads(line) for line in out.strip().splitlines()[-2:])
    assert round_["role"] == "proposer" and round_["candidate"] == "proposer@v1", round_
    assert round_["status"] in ("promoted", "rejected") and round_["rows"] >= 16, round_
    assert [m["metric"] for m in report] == list(GAME.report_metrics)
    assert all(m["before"]["n"] == 4 for m in report if m["metric"] != "invalid_move_rate")


@pytest.mark.slow
def test_the_bundled_model_negotiates_and_judges_coherence(env: Path, monkeypatch) -> None:
    """The real bundled model as proposer (against the fair bot) and as the judge model."""
    monkeypatch.delenv("SPARRING_CACHE_DIR")  # the default model cache: converted once per machine
    out = cli("play", "negotiation", "-n", "3", "-c", "3", "--max-turns", "2", "--max-new-tokens", "16",
              "--temperature", "0.7", "--seat", "judge=model", "--format", "json")
    played = json.loads(out.strip().splitlines()[-1])[0]
    assert played["succeeded"] == 3 and played["invalid_move_rate"] == 0.0  # constrained moves are valid
    assert 0.0 <= played["own_value_share"] <= 1.0 and 0.0 <= played["judge_coherence"] <= 1.0
    engine = open_store(f"sqlite:///{env / 'nego.db'}")
    with engine.connect() as conn:
        moves = list(conn.execute(select(Turn.served_by, Turn.parsed_value).where(Turn.seat == "proposer")))
        judged = list(conn.execute(select(Judgment.score, Judgment.judge_policy).where(
            Judgment.rubric == "coherence", Judgment.scored_seat == "proposer", Judgment.judge_policy != "rules")))
    assert len(moves) == 3 and {served for served, _ in moves} == {"bundled"}  # one move each, then the bot's
    assert all(line.startswith("Propose books=") for _, line in moves)  # no offer to accept on the first move
    assert len(judged) == 3 and all(score in (0.0, 0.25, 0.5, 0.75, 1.0) for score, _ in judged)
