"""Synthetic game logs shaped like what `sparring play` records, for the store benchmarks.

``synthetic_runs(n_turns)`` yields runs of episodes, oldest first, until ``n_turns`` turns
were made. Each episode is the records a real game sends, in the order it sends them
(start, turns with their rewards, judgments, end), with the real prompts of the games:

* 80% ``math-reflection`` (actor / critic learners, rules judge): actor and critic turns
  in pairs, 1-3 answers, stopping early when the critic approves; a ``correct`` reward on
  each answer and a ``verdict_correct`` reward on each critique.
* 20% ``debate`` (debater_a learner, scripted debater_b, rules judge): two rounds, a
  ``correct`` reward on every argument, a judgment and ``win`` rewards on the last ones.

Runs hold 256 episodes; half of them play every task 4 times (``--samples 4``), so builds
find groups of samples sharing one prompt. 90% of the episodes are in the ``train`` split.
Adapter versions rise over time (``actor@v1`` ... ``actor@v6``). Statuses: about 93%
succeeded, 5% failed, 1% timeout, 1% still running. Token ids and logprobs come from a pool
of realistic lengths (prompts 40-300 tokens, completions 16-64), shared between turns to keep
generation fast; texts and prompts are made per task, so every task has its own prompts.
Everything is deterministic in ``seed``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from graphs.debate.prompts import debater_messages
from graphs.math_reflection.prompts import actor_messages, critic_messages, refine_messages
from graphs.seats import RULES
from storage.records import (
    EpisodeEnd,
    EpisodeStart,
    EpisodeStatus,
    JudgmentRecord,
    RewardRecord,
    RunRecord,
    TurnRecord,
)

GENERATOR_VERSION = 2
"""Part of the cached stores' names: change it whenever what is generated changes."""
GameRecord = EpisodeStart | TurnRecord | RewardRecord | JudgmentRecord | EpisodeEnd
T0 = datetime(2026, 1, 1, tzinfo=UTC)
EPISODES_PER_RUN = 256
EPISODE_SPACING_S = 20.0
"""mean time between episode starts: 1M turns span about two months"""
MODEL = "bundled"
VERSIONS = 6
POOL_SIZE = 512


@dataclass
class SyntheticRun:
    run: RunRecord
    episodes: list[list[GameRecord]] = field(default_factory=list)

    @property
    def finished_at(self) -> datetime:
        last = self.episodes[-1][-1] if self.episodes else None
        return last.finished_at if isinstance(last, EpisodeEnd) else self.run.started_at

    @property
    def turns(self) -> int:
        return sum(type(r) is TurnRecord for episode in self.episodes for r in episode)


@dataclass(frozen=True)
class _Tokens:
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]


def _float32(value: float) -> float:
    """A logprob as a model returns it: a float32 widened to a Python float."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _token_pool(rng: random.Random) -> _Tokens:
    completions = [[rng.randrange(49152) for _ in range(rng.randint(16, 64))] for _ in range(POOL_SIZE)]
    return _Tokens(
        prompt_ids=[[rng.randrange(49152) for _ in range(rng.randint(40, 300))] for _ in range(POOL_SIZE)],
        completion_ids=completions,
        logprobs=[[_float32(-rng.expovariate(3.0)) for _ in ids] for ids in completions],
    )


class _Generator:
    """One episode at a time; the clock and the ids advance as records are made."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tokens = _token_pool(self.rng)
        self.clock = T0

    def new_id(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def tick(self, mean_s: float) -> datetime:
        self.clock += timedelta(seconds=self.rng.expovariate(1.0 / mean_s))
        return self.clock

    def run(self, index: int) -> RunRecord:
        game = "math-reflection" if self.rng.random() < 0.8 else "debate"
        samples = self.rng.choice((1, 4))
        return RunRecord(
            id=self.new_id(),
            game=game,
            config={"episodes": EPISODES_PER_RUN, "samples": samples, "concurrency": 16, "turns": 3},
            seed=index,
            host="bench-host",
            pid=10_000 + index,
            started_at=self.tick(EPISODE_SPACING_S),
        )

    @staticmethod
    def version(index: int, total_runs: int) -> int:
        """Adapter version in use: v1 for the first sixth of the runs, then v2..."""
        return min(VERSIONS, 1 + index * VERSIONS // total_runs)

    def turn(
        self,
        episode_id: str,
        index: int,
        round_: int,
        seat: str,
        policy: tuple[str, str, str],
        messages: list[dict[str, str]],
        response: str,
        parsed_value: str | None,
    ) -> TurnRecord:
        tokens, pick = self.tokens, self.rng.randrange(POOL_SIZE)
        label, served_by, backend = policy
        return TurnRecord(
            id=self.new_id(),
            episode_id=episode_id,
            index=index,
            round=round_,
            seat=seat,
            seat_kind="context" if backend == "scripted" else "learner",
            policy=label,
            served_by=served_by,
            backend=backend,
            messages=messages,
            response=response,
            prompt_token_ids=tokens.prompt_ids[pick],
            completion_token_ids=tokens.completion_ids[pick],
            logprobs=tokens.logprobs[pick],
            finish_reason="length" if self.rng.random() < 0.15 else "stop",
            latency_ms=self.rng.uniform(200.0, 4000.0),
            sampling={"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 64, "seed": self.rng.getrandbits(31)},
            parsed=parsed_value is not None,
            parsed_value=parsed_value,
            created_at=self.tick(1.5),
        )


def _task(rng: random.Random, run: RunRecord, index: int) -> dict[str, Any]:
    level = rng.randint(1, 4)
    a, b, c = rng.randint(2, 10**level), rng.randint(2, 99), rng.randint(2, 9)
    split = "train" if rng.random() < 0.9 else "heldout"
    return {
        "id": f"arith-{split}-{level}-{run.seed:05d}{index:03d}",
        "question": f"A shop has {a} boxes with {b} pens each. It sells {c} boxes. How many pens are left?",
        "answer": str((a - c) * b),
        "source": "arithmetic",
        "split": split,
        "difficulty": str(level),
        "meta": {"level": level, "seed": run.seed},
    }


def _answer(rng: random.Random, task: dict[str, Any], correct: bool) -> tuple[str, str | None]:
    """(response, parsed value); an unparsed answer is incorrect."""
    truth = int(task["answer"])
    if not correct and rng.random() < 0.1:
        return "I am not sure how to solve this one, the numbers do not add up.", None
    value = str(truth if correct else truth + rng.choice((-10, -1, 1, 2, 100)))
    return (
        f"First find how many boxes are left, then multiply by the pens in each box. "
        f"That gives {value} pens in the shop after the sale.\nAnswer: {value}",
        value,
    )


def _critique(rng: random.Random, says_correct: bool) -> tuple[str, str | None]:
    if rng.random() < 0.08:
        return "The solution multiplies the boxes by the pens but I cannot check the sale.", None
    if says_correct:
        return "The steps are right and the arithmetic checks out.\nVerdict: correct", "correct"
    return "The subtraction of the sold boxes is wrong, so the total is off.\nVerdict: incorrect", "incorrect"


def _end_status(rng: random.Random) -> EpisodeStatus:
    draw = rng.random()
    if draw < 0.05:
        return EpisodeStatus.FAILED
    if draw < 0.06:
        return EpisodeStatus.TIMEOUT
    if draw < 0.07:
        return EpisodeStatus.RUNNING  # no end recorded: interrupted, never marked
    return EpisodeStatus.SUCCEEDED


def _math_reflection(gen: _Generator, run: RunRecord, task: dict[str, Any], version: int) -> list[GameRecord]:
    rng = gen.rng
    actor = (f"{MODEL}+actor@v{version}", f"actor@v{version}", "inprocess")
    critic = (f"{MODEL}+critic@v{version}", f"critic@v{version}", "inprocess")
    start = _start(gen, run, task, {"actor": actor[0], "critic": critic[0], "judge": RULES})
    records: list[GameRecord] = [start]
    status = _end_status(rng)
    stop_at = rng.randint(1, 6) if status is not EpisodeStatus.SUCCEEDED else None
    answers: list[bool] = []
    previous: tuple[str, str] | None = None
    for round_ in range(3):
        if stop_at is not None and 2 * round_ >= stop_at:
            break
        correct = rng.random() < (0.25 if round_ == 0 else 0.4)
        response, value = _answer(rng, task, correct)
        correct = correct and value is not None
        messages = (
            actor_messages(task["question"])
            if previous is None
            else refine_messages(task["question"], previous[0], previous[1])
        )
        answer = gen.turn(start.id, 2 * round_, round_, "actor", actor, messages, response, value)
        answers.append(correct)
        records.append(answer)
        records.append(_reward(gen, start.id, "actor", "correct", float(correct), answer, round=round_, answer=value))
        if stop_at is not None and 2 * round_ + 1 >= stop_at:
            break
        says_correct = correct if rng.random() < 0.6 else not correct
        critique_text, verdict = _critique(rng, says_correct)
        critique = gen.turn(
            start.id,
            2 * round_ + 1,
            round_,
            "critic",
            critic,
            critic_messages(task["question"], response),
            critique_text,
            verdict,
        )
        records.append(critique)
        verdict_correct = verdict is not None and (verdict == "correct") == correct
        records.append(
            _reward(
                gen, start.id, "critic", "verdict_correct", float(verdict_correct), critique,
                round=round_, verdict=verdict, truth=correct,
            )
        )
        previous = (response, critique_text)
        if verdict == "correct":
            break
    outcome = {"answers": len(answers), "correct": answers, "final_correct": answers[-1] if answers else None}
    return _finish(gen, records, start, status, float(answers[-1]) if answers else None, outcome)


def _debate(gen: _Generator, run: RunRecord, task: dict[str, Any], version: int) -> list[GameRecord]:
    rng = gen.rng
    policies = {
        "debater_a": (f"{MODEL}+debater_a@v{version}", f"debater_a@v{version}", "inprocess"),
        "debater_b": ("scripted:stubborn", "stubborn", "scripted"),
    }
    seats = {"debater_a": policies["debater_a"][0], "debater_b": policies["debater_b"][0], "judge": RULES}
    start = _start(gen, run, task, seats)
    records: list[GameRecord] = [start]
    status = _end_status(rng)
    arguments: list[dict[str, Any]] = []
    last: dict[str, TurnRecord] = {}
    final: dict[str, bool] = {}
    for index in range(4 if status is EpisodeStatus.SUCCEEDED else rng.randint(1, 3)):
        seat, round_ = ("debater_a", "debater_b")[index % 2], index // 2
        correct = rng.random() < (0.35 if seat == "debater_a" else 0.2)
        response, value = _answer(rng, task, correct)
        correct = correct and value is not None
        messages = debater_messages(task["question"], seat, arguments)  # type: ignore[arg-type]
        turn = gen.turn(start.id, index, round_, seat, policies[seat], messages, response, value)
        arguments.append({"seat": seat, "round": round_, "text": response, "answer": value})
        records.append(turn)
        records.append(_reward(gen, start.id, seat, "correct", float(correct), turn, round=round_, answer=value))
        last[seat], final[seat] = turn, correct
    if status is not EpisodeStatus.SUCCEEDED:
        return _finish(gen, records, start, status, None, {})
    winner = next((s for s in ("debater_a", "debater_b") if final[s] and not final[_other(s)]), None)
    loser = None if winner is None else _other(winner)
    records.append(
        JudgmentRecord(
            episode_id=start.id,
            judge_seat="judge",
            judge_policy=RULES,
            winner_seat=winner,
            loser_seat=loser,
            preferred_turn_id=None if winner is None else last[winner].id,
            rejected_turn_id=None if loser is None else last[loser].id,
            rationale=f"Ground truth {task['answer']!r}: checked both final answers.",
            created_at=gen.tick(0.05),
        )
    )
    win = {s: 0.5 if winner is None else float(s == winner) for s in last}
    for seat, turn in last.items():
        records.append(_reward(gen, start.id, seat, "win", win[seat], turn, judged_by=RULES))
    return _finish(gen, records, start, status, win["debater_a"], {"winner": winner, "rounds": 2})


def _other(seat: str) -> str:
    return "debater_b" if seat == "debater_a" else "debater_a"


def _start(gen: _Generator, run: RunRecord, task: dict[str, Any], seats: dict[str, str]) -> EpisodeStart:
    return EpisodeStart(
        id=gen.new_id(),
        run_id=run.id,
        game=run.game,
        task_id=task["id"],
        task_source=task["source"],
        split=task["split"],
        difficulty=task["difficulty"],
        seed=gen.rng.getrandbits(31),
        seats=seats,
        task=task,
        started_at=gen.tick(EPISODE_SPACING_S),
    )


def _reward(
    gen: _Generator, episode_id: str, seat: str, name: str, value: float, turn: TurnRecord, **info: Any
) -> RewardRecord:
    return RewardRecord(episode_id, seat, name, value, turn.id, info, created_at=gen.tick(0.01))


def _finish(
    gen: _Generator,
    records: list[GameRecord],
    start: EpisodeStart,
    status: EpisodeStatus,
    reward: float | None,
    outcome: dict[str, Any],
) -> list[GameRecord]:
    if status is EpisodeStatus.RUNNING:
        return records
    turns = sum(type(r) is TurnRecord for r in records)
    failed = status is not EpisodeStatus.SUCCEEDED
    records.append(
        EpisodeEnd(
            episode_id=start.id,
            status=status,
            reward=None if failed else reward,
            num_turns=turns,
            outcome=outcome,
            error="BackendError: the model server closed the connection" if failed else None,
            error_stage=f"turn {turns}" if failed else None,
            finished_at=gen.tick(0.5),
        )
    )
    return records


def synthetic_runs(n_turns: int, *, seed: int = 0) -> Iterator[SyntheticRun]:
    """Runs of episodes, oldest first, until at least ``n_turns`` turns were made."""
    if n_turns < 1:
        raise ValueError(f"n_turns must be >= 1, got {n_turns}")
    gen = _Generator(seed)
    total_runs = max(1, n_turns // (EPISODES_PER_RUN * 4))
    made, index = 0, 0
    while made < n_turns:
        run = SyntheticRun(gen.run(index))
        version = gen.version(index, total_runs)
        play = _math_reflection if run.run.game == "math-reflection" else _debate
        samples = run.run.config["samples"]
        task: dict[str, Any] = {}
        for episode in range(EPISODES_PER_RUN):
            if episode % samples == 0:
                task = _task(gen.rng, run.run, episode // samples)
            records = play(gen, run.run, task, version)
            run.episodes.append(records)
            made += sum(type(r) is TurnRecord for r in records)
            if made >= n_turns:
                break
        yield run
        index += 1
