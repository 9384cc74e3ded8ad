"""Builders of game records for tests, with plausible defaults that any keyword overrides."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from storage.records import (
    EpisodeEnd,
    EpisodeStart,
    EpisodeStatus,
    JudgmentRecord,
    RecordSink,
    RewardRecord,
    RunRecord,
    TurnRecord,
)

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
"""A fixed start time; tests place episodes at T0 + n minutes."""


def new_id() -> str:
    return uuid.uuid4().hex


def run_record(**overrides: Any) -> RunRecord:
    values: dict[str, Any] = {
        "id": new_id(),
        "game": "math-reflection",
        "config": {"episodes": 4, "turns": 3},
        "seed": 7,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    return RunRecord(**{**values, **overrides})


def episode_start(**overrides: Any) -> EpisodeStart:
    values: dict[str, Any] = {
        "id": new_id(),
        "run_id": None,
        "game": "math-reflection",
        "task_id": "gsm8k-0001",
        "task_source": "gsm8k",
        "split": "train",
        "difficulty": "easy",
        "seed": 1234,
        "seats": {"actor": "model", "critic": "critic@v2"},
        "task": {"question": "What is 2 + 3?", "answer": "5", "metadata": {"level": 1}},
    }
    return EpisodeStart(**{**values, **overrides})


def turn_record(episode_id: str, index: int, **overrides: Any) -> TurnRecord:
    values: dict[str, Any] = {
        "id": new_id(),
        "episode_id": episode_id,
        "index": index,
        "round": index // 2,
        "seat": "actor" if index % 2 == 0 else "critic",
        "seat_kind": "learner",
        "policy": "smollm2@base",
        "served_by": "SmolLM2-135M-Instruct",
        "backend": "scripted",
        "messages": [
            {"role": "system", "content": "Solve the problem."},
            {"role": "user", "content": f"What is 2 + 3? (turn {index})"},
        ],
        "response": f"The answer is {index + 5}.",
        "prompt_token_ids": [1, 2, 3, 500 + index, 49151],
        "completion_token_ids": [7, 8, 9 + index],
        "logprobs": [-0.125, -1.0000000000000002, -3.5e-05],
        "finish_reason": "stop",
        "latency_ms": 12.5 + index,
        "sampling": {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 64, "seed": 11, "stop": []},
        "parsed": True,
        "parsed_value": str(index + 5),
    }
    return TurnRecord(**{**values, **overrides})


def episode_end(episode_id: str, **overrides: Any) -> EpisodeEnd:
    values: dict[str, Any] = {
        "episode_id": episode_id,
        "status": EpisodeStatus.SUCCEEDED,
        "reward": 1.0,
        "num_turns": 2,
        "outcome": {"final_answer": "5", "correct": True},
    }
    return EpisodeEnd(**{**values, **overrides})


@dataclass
class RecordedEpisode:
    """What ``record_episode`` sent, to compare with what the store gives back."""

    start: EpisodeStart
    turns: list[TurnRecord] = field(default_factory=list)
    rewards: list[RewardRecord] = field(default_factory=list)
    judgments: list[JudgmentRecord] = field(default_factory=list)
    end: EpisodeEnd | None = None


def record_episode(
    sink: RecordSink,
    *,
    seats: tuple[str, ...] = ("actor", "critic"),
    turns: int = 2,
    policy: str = "smollm2@base",
    finished: bool = True,
    status: EpisodeStatus = EpisodeStatus.SUCCEEDED,
    reward: float | None = 1.0,
    error_stage: str | None = None,
    minute: int = 0,
    **start_overrides: Any,
) -> RecordedEpisode:
    """Play a fake episode into ``sink``: its start, ``turns`` turns cycling through
    ``seats``, a reward per turn, a judgment between the first two turns, and (if
    ``finished``) its end. It starts at T0 + ``minute`` minutes."""
    started_at = T0 + timedelta(minutes=minute)
    ep = RecordedEpisode(episode_start(started_at=started_at, **start_overrides))
    sink.episode_started(ep.start)
    for i in range(turns):
        turn = turn_record(
            ep.start.id,
            i,
            seat=seats[i % len(seats)],
            policy=policy,
            served_by=policy,
            created_at=started_at + timedelta(seconds=i + 1),
        )
        ep.turns.append(turn)
        sink.turn(turn)
        ep.rewards.append(RewardRecord(ep.start.id, turn.seat, "correct", float(i % 2), turn.id, {"turn": i}))
        sink.reward(ep.rewards[-1])
    if turns >= 2:
        ep.judgments.append(
            JudgmentRecord(
                episode_id=ep.start.id,
                judge_seat="judge",
                judge_policy="rules",
                winner_seat=ep.turns[1].seat,
                loser_seat=ep.turns[0].seat,
                preferred_turn_id=ep.turns[1].id,
                rejected_turn_id=ep.turns[0].id,
                rationale="the second answer checks out",
            )
        )
        sink.judgment(ep.judgments[-1])
    if finished:
        ep.end = episode_end(
            ep.start.id,
            status=status,
            reward=reward,
            num_turns=turns,
            error=None if error_stage is None else f"failed at {error_stage}",
            error_stage=error_stage,
            finished_at=started_at + timedelta(seconds=turns + 1),
        )
        sink.episode_finished(ep.end)
    return ep


def record_in_process(url: str, worker: int, episodes: int) -> None:
    """Target of a child process: open the store, record ``episodes`` episodes of one run in
    small batches (many transactions), close. Raises, so the exit code shows any failure."""
    from storage.engine import open_store
    from storage.recorder import Recorder

    engine = open_store(url)
    recorder = Recorder(engine, batch_size=4, flush_interval_s=0.001)
    run = run_record(config={"worker": worker})
    recorder.start_run(run)
    for n in range(episodes):
        record_episode(recorder, run_id=run.id, turns=3, minute=n)
    recorder.finish_run(run.id, "finished", {"episodes": episodes})
    recorder.close()
    engine.dispose()
