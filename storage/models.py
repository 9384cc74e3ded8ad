"""Every table of sparring, in one module; migrations/versions mirror it by hand.

Narrow columns that queries filter and sort on live in ``episodes`` and ``turns``; the large
payloads (task, messages, token ids, logprobs) live one-to-one beside them in
``episode_payloads`` and ``turn_payloads``, so that filtering scans and indexes stay small.
Row ids written by the games are 32-character hex strings (``uuid4().hex``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from storage.records import utcnow

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware.

    SQLite keeps no time zone, so values are converted to UTC on the way in and tagged UTC on
    the way out; a naive datetime is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class RunStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class DatasetKind(StrEnum):
    DPO = "dpo"
    KTO = "kto"
    PPO = "ppo"
    SFT = "sft"
    REWARD = "reward"


class AdapterStatus(StrEnum):
    CANDIDATE = "candidate"
    ACTIVE = "active"
    RETIRED = "retired"
    REJECTED = "rejected"


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


ID = String(32)
STATUS = String(16)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
        str: String(),
        int: Integer(),
        float: Double(),
    }


# --- games: runs, episodes, turns and the events on them -----------------------------------


class Run(Base):
    """One invocation of `sparring play` (or a retrain round's play phase).

    `sparring play --workers N` writes one run for the command (it holds no episodes) and one
    child run per worker process, whose ``parent_id`` names the command's run.
    """

    __tablename__ = "runs"
    __table_args__ = (Index(None, "status", "started_at"), Index(None, "started_at"), Index(None, "parent_id"))

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    game: Mapped[str]
    config: Mapped[dict[str, Any]]
    seed: Mapped[int] = mapped_column(BigInteger)
    host: Mapped[str]
    pid: Mapped[int]
    status: Mapped[str] = mapped_column(STATUS, default=RunStatus.RUNNING)
    summary: Mapped[dict[str, Any] | None]
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    parent_id: Mapped[str | None] = mapped_column(ID)
    """the command's run, for a worker's run; no foreign key, so that SQLite can add the column in place"""


class Episode(Base):
    __tablename__ = "episodes"
    __table_args__ = (
        Index(None, "game", "status", "started_at"),
        Index(None, "game", "started_at"),
        Index(None, "status", "started_at"),
        Index(None, "run_id", "status"),
        Index(None, "split", "game"),
        Index(None, "task_id"),
        Index(None, "reward"),
        Index(None, "started_at"),
        Index(None, "game", "commit_seq"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str | None] = mapped_column(ID, ForeignKey("runs.id", ondelete="CASCADE"))
    game: Mapped[str]
    task_id: Mapped[str]
    task_source: Mapped[str]
    split: Mapped[str | None]
    difficulty: Mapped[str | None]
    seed: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(STATUS)
    reward: Mapped[float | None]
    num_turns: Mapped[int] = mapped_column(default=0)
    error_stage: Mapped[str | None]
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    commit_seq: Mapped[int | None] = mapped_column(BigInteger)
    """the number of the transaction that ended the episode (``storage.commits``): numbers follow
    commit order, so a dataset build can tell what committed after it read"""


class CommitSequence(Base):
    """One row: the number of the last transaction that ended an episode (``storage.commits``)."""

    __tablename__ = "commit_sequence"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    value: Mapped[int] = mapped_column(BigInteger)


class EpisodePayload(Base):
    __tablename__ = "episode_payloads"

    episode_id: Mapped[str] = mapped_column(
        ID, ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True
    )
    task: Mapped[dict[str, Any]]
    seats: Mapped[dict[str, Any]]
    """seat name -> policy label"""
    outcome: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)


class Turn(Base):
    """One model call inside an episode."""

    __tablename__ = "turns"
    __table_args__ = (
        Index(None, "episode_id", "idx"),
        Index(None, "seat", "episode_id"),
        Index(None, "policy"),
        Index(None, "served_by"),
        Index(None, "created_at"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    idx: Mapped[int]
    """0-based position of the turn in its episode (TurnRecord.index)."""
    round: Mapped[int]
    seat: Mapped[str]
    seat_kind: Mapped[str] = mapped_column(STATUS)
    policy: Mapped[str]
    served_by: Mapped[str]
    backend: Mapped[str]
    finish_reason: Mapped[str]
    prompt_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    latency_ms: Mapped[float]
    parsed: Mapped[bool | None] = mapped_column(Boolean)
    parsed_value: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TurnPayload(Base):
    __tablename__ = "turn_payloads"

    turn_id: Mapped[str] = mapped_column(ID, ForeignKey("turns.id", ondelete="CASCADE"), primary_key=True)
    messages: Mapped[list[Any]]
    response: Mapped[str] = mapped_column(Text)
    prompt_token_ids: Mapped[list[Any]]
    completion_token_ids: Mapped[list[Any]]
    logprobs: Mapped[list[Any]]
    sampling: Mapped[dict[str, Any]]


class Reward(Base):
    """An append-only reward event on an episode and, where it applies, one of its turns."""

    __tablename__ = "rewards"
    __table_args__ = (Index(None, "episode_id"), Index(None, "turn_id"), Index(None, "seat", "name"))

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    turn_id: Mapped[str | None] = mapped_column(ID, ForeignKey("turns.id", ondelete="SET NULL"))
    seat: Mapped[str]
    name: Mapped[str]
    value: Mapped[float]
    info: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Judgment(Base):
    """A judge's verdict on an episode: a preference between two sides (a tie when no winner),
    or a score of one side (``scored_seat``) on a named rubric, or both."""

    __tablename__ = "judgments"
    __table_args__ = (Index(None, "episode_id"), Index(None, "judge_seat", "created_at"))

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ID, ForeignKey("episodes.id", ondelete="CASCADE"))
    judge_seat: Mapped[str]
    judge_policy: Mapped[str]
    judge_turn_id: Mapped[str | None] = mapped_column(ID, ForeignKey("turns.id", ondelete="SET NULL"))
    winner_seat: Mapped[str | None]
    loser_seat: Mapped[str | None]
    preferred_turn_id: Mapped[str | None] = mapped_column(ID, ForeignKey("turns.id", ondelete="SET NULL"))
    rejected_turn_id: Mapped[str | None] = mapped_column(ID, ForeignKey("turns.id", ondelete="SET NULL"))
    rationale: Mapped[str] = mapped_column(Text)
    rubric: Mapped[str | None]
    """what was judged ("correctness", "fairness", "consistency", ...); None in judgments before 0004"""
    score: Mapped[float | None]
    """the rubric's score of ``scored_seat`` (or of the episode when no seat is named), when it scores"""
    scored_seat: Mapped[str | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# --- training: dataset snapshots, adapter registry, jobs, evaluations ----------------------


class DatasetSnapshot(Base):
    """Rows built from the logs for one role and trainer kind, and how they were selected."""

    __tablename__ = "dataset_snapshots"
    __table_args__ = (Index(None, "role", "kind", "created_at"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(STATUS)
    """a DatasetKind"""
    role: Mapped[str]
    game: Mapped[str | None]
    base_model: Mapped[str]
    filter_spec: Mapped[dict[str, Any]]
    """the query that selected the rows (an EpisodeFilter as a dict, plus builder options)"""
    watermark: Mapped[datetime | None]
    """high-water mark of the rows read (e.g. the latest turn created_at), for people: builds
    continue from ``horizon`` when the snapshot has one"""
    horizon: Mapped[int | None] = mapped_column(BigInteger)
    """the build read the episodes whose ``commit_seq`` is below this; the next build of the same
    role and kind reads from here on (None: built before commit numbers, or on turns)"""
    row_count: Mapped[int]
    path: Mapped[str]
    content_hash: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AdapterVersion(Base):
    """A trained LoRA adapter, its lineage and where it is in candidate -> active -> retired."""

    __tablename__ = "adapter_versions"
    __table_args__ = (UniqueConstraint("role", "version"), Index(None, "role", "status"))

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    role: Mapped[str]
    version: Mapped[int]
    name: Mapped[str] = mapped_column(unique=True)
    """immutable ``role@vN``, what backends serve it as"""
    base_model: Mapped[str]
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("adapter_versions.id"))
    dataset_snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_snapshots.id"))
    trainer: Mapped[str]
    config: Mapped[dict[str, Any]]
    path: Mapped[str]
    status: Mapped[str] = mapped_column(STATUS, default=AdapterStatus.CANDIDATE)
    eval: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    promoted_at: Mapped[datetime | None]


class TrainingJob(Base):
    __tablename__ = "training_jobs"
    __table_args__ = (Index(None, "status", "created_at"), Index(None, "role", "created_at"))

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(STATUS)
    """the trainer kind (``training.trainers.kinds``): sft, dpo, kto, ppo, grpo, or reward (a verifier)"""
    role: Mapped[str]
    status: Mapped[str] = mapped_column(STATUS, default=JobStatus.QUEUED)
    dataset_snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_snapshots.id"))
    adapter_version_id: Mapped[int | None] = mapped_column(ForeignKey("adapter_versions.id"))
    """the adapter version the job produced"""
    config: Mapped[dict[str, Any]]
    metrics: Mapped[dict[str, Any] | None]
    history: Mapped[list[Any] | None]
    """the trainer's log entries (loss, learning rate, reward margins... per step), kept while it trains"""
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    """when the job was queued"""
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class Evaluation(Base):
    """Metrics of one adapter version (optionally against a baseline) on held-out tasks."""

    __tablename__ = "evaluations"
    __table_args__ = (Index(None, "adapter_version_id", "created_at"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    adapter_version_id: Mapped[int] = mapped_column(ForeignKey("adapter_versions.id"))
    baseline_version_id: Mapped[int | None] = mapped_column(ForeignKey("adapter_versions.id"))
    game: Mapped[str]
    split: Mapped[str]
    n_tasks: Mapped[int]
    seed: Mapped[int] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
