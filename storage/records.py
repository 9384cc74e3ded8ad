"""What the games hand to the recorder: plain records, one per row-to-be.

A game's episodes never touch SQLAlchemy: its nodes emit these records through a
``RecordSink`` (its metrics read the store afterwards, with queries of their own). The
recorder (storage.recorder) writes them in batches on its own thread.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol


def utcnow() -> datetime:
    return datetime.now(UTC)


class EpisodeStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"


@dataclass
class RunRecord:
    """One invocation of `sparring play` (or a retrain round's play phase)."""

    id: str
    game: str
    config: dict[str, Any]
    seed: int
    host: str
    pid: int
    started_at: datetime = field(default_factory=utcnow)
    parent_id: str | None = None
    """the run of the `sparring play --workers` command this worker's run belongs to"""

    @classmethod
    def new(cls, game: str, config: dict[str, Any], seed: int, *, parent_id: str | None = None) -> RunRecord:
        """A run started now by this process (a fresh id, this host and pid)."""
        return cls(uuid.uuid4().hex, game, config, seed, socket.gethostname(), os.getpid(), parent_id=parent_id)


@dataclass
class EpisodeStart:
    id: str
    run_id: str | None
    game: str
    task_id: str
    task_source: str
    split: str | None
    difficulty: str | None
    seed: int
    seats: dict[str, str]
    """seat name -> policy label"""
    task: dict[str, Any]
    """the task payload (question, answer, metadata)"""
    started_at: datetime = field(default_factory=utcnow)


@dataclass
class TurnRecord:
    id: str
    episode_id: str
    index: int
    """0-based position of the turn in its episode."""
    round: int
    seat: str
    seat_kind: str
    policy: str
    served_by: str
    """the adapter (or base model) that actually served the turn"""
    backend: str
    messages: list[dict[str, str]]
    response: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    latency_ms: float
    sampling: dict[str, Any]
    parsed: bool | None = None
    """whether the game could parse what it needed from the response (None: nothing to parse)"""
    parsed_value: str | None = None
    created_at: datetime = field(default_factory=utcnow)


@dataclass
class RewardRecord:
    """An append-only reward event on an episode and, where it applies, a turn."""

    episode_id: str
    seat: str
    name: str
    value: float
    turn_id: str | None = None
    info: dict[str, Any] | None = None
    created_at: datetime = field(default_factory=utcnow)


@dataclass
class JudgmentRecord:
    """A judge's preference between two sides (tie when no winner) and/or its score of one
    side on a rubric."""

    episode_id: str
    judge_seat: str
    judge_policy: str
    winner_seat: str | None
    loser_seat: str | None
    preferred_turn_id: str | None
    rejected_turn_id: str | None
    rationale: str
    judge_turn_id: str | None = None
    rubric: str | None = None
    score: float | None = None
    scored_seat: str | None = None
    created_at: datetime = field(default_factory=utcnow)


@dataclass
class EpisodeEnd:
    episode_id: str
    status: EpisodeStatus
    reward: float | None
    """the episode's headline reward (for math-reflection: correctness of the final answer)"""
    num_turns: int
    outcome: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_stage: str | None = None
    """where a failure happened, e.g. "critic turn 3" or "judge" """
    finished_at: datetime = field(default_factory=utcnow)


class RecordSink(Protocol):
    """Where games send their records. Calls never block on the database."""

    def episode_started(self, record: EpisodeStart) -> None: ...

    def turn(self, record: TurnRecord) -> None: ...

    def reward(self, record: RewardRecord) -> None: ...

    def judgment(self, record: JudgmentRecord) -> None: ...

    def episode_finished(self, record: EpisodeEnd) -> None: ...
