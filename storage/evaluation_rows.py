"""The rows that evaluations and reports are read from: finished runs with their summaries, a
run's game, and the model answers the rules judge scored (to measure a trained verifier on)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select

from storage.models import Episode, Reward, Run, RunStatus, Turn, TurnPayload
from storage.queries import SCRIPTED_BACKEND
from storage.records import EpisodeStatus


@dataclass(frozen=True)
class FinishedRun:
    id: str
    game: str
    config: dict[str, Any] | None
    summary: dict[str, Any]
    started_at: datetime


@dataclass(frozen=True)
class ScoredAnswer:
    """A model's turn and one reward event on it."""

    turn_id: str
    difficulty: str | None
    """its episode's"""
    messages: list[dict[str, Any]]
    """the prompt"""
    response: str
    value: float


def run_game(engine: Engine, run_id: str) -> str | None:
    """The game of the run ``run_id`` (None: no such run)."""
    with engine.connect() as conn:
        return conn.execute(select(Run.game).where(Run.id == run_id)).scalar_one_or_none()


def finished_runs(engine: Engine, *, config: Mapping[str, str] | None = None) -> list[FinishedRun]:
    """The finished runs that left a summary (whose config holds each entry of ``config``, where
    given), oldest first."""
    query = (
        select(Run.id, Run.game, Run.config, Run.summary, Run.started_at)
        .where(Run.status == RunStatus.FINISHED.value, Run.summary.is_not(None))
        .order_by(Run.started_at)
    )
    for name, value in (config or {}).items():
        query = query.where(Run.config[name].as_string() == value)
    with engine.connect() as conn:
        return [FinishedRun(*row) for row in conn.execute(query)]


def scored_answers(engine: Engine, *, game: str, split: str, seat: str, reward: str) -> Iterator[ScoredAnswer]:
    """The turns of ``seat`` that a model played (never a scripted bot) in the succeeded episodes
    of ``game`` and ``split``, each with its ``reward`` events (a row per event, in the order they
    were recorded; a turn with none left out). Streamed in the order the episodes started, turns
    in order: stop reading when you have enough."""
    query = (
        select(Turn.id, Episode.difficulty, TurnPayload.messages, TurnPayload.response, Reward.value)
        .join(Episode, Episode.id == Turn.episode_id)
        .join(TurnPayload, TurnPayload.turn_id == Turn.id)
        .join(Reward, (Reward.turn_id == Turn.id) & (Reward.name == reward))
        .where(Episode.game == game, Episode.split == split, Episode.status == EpisodeStatus.SUCCEEDED.value,
               Turn.seat == seat, Turn.backend != SCRIPTED_BACKEND)
        .order_by(Episode.started_at, Episode.id, Turn.idx, Reward.id)
    )
    with engine.connect() as conn:
        for row in conn.execute(query):
            yield ScoredAnswer(*row)
