"""The gateway's episodes: which episode and seat a call belongs to, and its records.

A call names its episode and seat (``X-Sparring-Episode`` / ``X-Sparring-Seat`` headers, or
``metadata.episode_id`` / ``metadata.seat`` in the body); a call without an episode joins the
episode of its conversation (``X-Sparring-Conversation`` or ``metadata.conversation_id``:
opened by its first call, kept until ended) or stands alone as a one-turn episode. Episodes
live in memory while open; everything else is read back from the store. Records go through
the Ledger (the Recorder, waited for before a request is answered), under one run per gateway
process: when the gateway stops, the episodes no client ended are marked failed as interrupted
ones are (``Recorder.abort_running``); if it is killed, the next command's stale-work cleanup
marks them.

After an outage of the store (``app.gateway.ledger``), what the Book holds about an episode may
be ahead of the store: its turn counts, even its start. Before writing to such an episode again,
the Book reads what the store has and goes on from there (``_settle``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Engine

from app.gateway import SPLIT
from app.gateway.errors import GatewayError
from app.gateway.ledger import Ledger
from graphs.policies.base import CANCELLED, GenerationResult, Message, SamplingParams
from graphs.policies.policy import Policy
from storage.gateway_rows import episode_progress, episode_status, turn_place
from storage.orphans import INTERRUPTED_STAGE
from storage.recorder import Recorder
from storage.records import EpisodeEnd, EpisodeStart, EpisodeStatus, JudgmentRecord, RewardRecord, TurnRecord

SEAT_KIND = "learner"
TASK_SOURCE = "gateway"
INTERRUPTED = "interrupted: the gateway stopped before a client ended the episode"
CLIENT_GONE = "interrupted: the client closed its connection before the reply"
NAME_LIMIT = 200
T = TypeVar("T")


@dataclass(frozen=True)
class Caller:
    """What a call says about where it belongs (each None when not said)."""

    episode: str | None
    seat: str | None
    conversation: str | None


@dataclass
class OpenEpisode:
    id: str
    start: EpisodeStart
    seats: tuple[str, ...]
    """the seats declared when it was opened (empty: any seat may call)"""
    conversation: str | None = None
    standalone: bool = False
    """a one-turn episode: ended as soon as its call is logged"""
    turns: int = 0
    rounds: dict[str, int] = field(default_factory=dict)
    """turns taken so far, by seat"""
    outages: int = 0
    """the Ledger's outage count when this was last known to match the store"""


class Book:
    def __init__(self, ledger: Ledger, *, game: str, run_id: str, split: str = SPLIT) -> None:
        self.ledger, self.game, self.run_id, self.split = ledger, game, run_id, split
        self._open: dict[str, OpenEpisode] = {}
        self._conversations: dict[str, str] = {}
        self._settling = asyncio.Lock()

    @property
    def recorder(self) -> Recorder:
        """The Recorder writing now (another one after an outage)."""
        return self.ledger.recorder

    async def open(self, *, game: str | None = None, task: dict[str, Any] | None = None,
                   seats: dict[str, str] | None = None, split: str | None = None, difficulty: str | None = None,
                   seed: int = 0, conversation: str | None = None, standalone: bool = False) -> OpenEpisode:
        """Start an episode; ``seats``: seat -> policy label (what plays it, as far as the client says);
        ``split``: the Book's own when not given."""
        task, episode_id = dict(task or {}), uuid.uuid4().hex
        start = EpisodeStart(id=episode_id, run_id=self.run_id, game=game or self.game,
                             task_id=str(task.get("id") or conversation or episode_id), task_source=TASK_SOURCE,
                             split=split or self.split, difficulty=difficulty, seed=seed, seats=dict(seats or {}),
                             task=task)
        episode = OpenEpisode(episode_id, start, tuple(seats or ()), conversation, standalone,
                              outages=self.ledger.outages)
        self._open[episode.id] = episode
        if conversation is not None:
            self._conversations[conversation] = episode.id
        try:
            await self.ledger.commit(start)
        except GatewayError:
            if conversation is None:  # nobody else knows it; a conversation's next call settles it
                self._forget(episode)
            raise
        return episode

    async def place(self, caller: Caller, default_seat: str) -> tuple[OpenEpisode, str]:
        """The episode and seat a call plays (a 404, 409 or 400 GatewayError when it cannot)."""
        seat = caller.seat or default_seat
        _check_name(seat, "seat")
        if caller.episode is not None:
            episode = await self.open_episode(caller.episode)
        elif caller.conversation is not None:
            _check_name(caller.conversation, "conversation id")
            known = self._conversations.get(caller.conversation)
            episode = self._open[known] if known is not None else await self.open(conversation=caller.conversation)
        else:
            episode = await self.open(standalone=True)
        if episode.seats and seat not in episode.seats:
            seats = ", ".join(episode.seats)
            raise GatewayError(400, f"episode {episode.id} has no seat {seat!r}; its seats: {seats}. Name "
                               "one with the X-Sparring-Seat header (or metadata.seat)",
                               "unknown_seat", "seat")
        return episode, seat

    async def open_episode(self, episode_id: str) -> OpenEpisode:
        """The open episode ``episode_id`` (404 if there is none, 409 if it has ended)."""
        if episode_id in self._open:
            return self._open[episode_id]
        status = await self._status(episode_id)
        if status is None:
            raise GatewayError(404, f"no episode {episode_id[:64]!r}: open one with POST /v1/episodes and send its id",
                               "episode_not_found", "episode_id")
        raise GatewayError(409, f"episode {episode_id} has ended (status {status}): it takes no more model calls; "
                           "open a new episode with POST /v1/episodes", "episode_ended", "episode_id")

    async def turn(self, episode: OpenEpisode, seat: str, policy: Policy, messages: list[Message],
                   sampling: SamplingParams, result: GenerationResult, started: float) -> TurnRecord:
        """Log a call's turn (and end a one-turn episode). 409 if the episode ended while it ran."""
        await self._settle(episode)
        if self._open.get(episode.id) is not episode:
            raise GatewayError(409, f"episode {episode.id} was ended while this call was generating: its reply is not "
                               "logged; end an episode only after its calls have answered", "episode_ended",
                               "episode_id")
        record = TurnRecord(
            id=uuid.uuid4().hex, episode_id=episode.id, index=episode.turns, round=episode.rounds.get(seat, 0),
            seat=seat, seat_kind=SEAT_KIND, policy=policy.label, served_by=result.served_by,
            backend=policy.backend.name, messages=list(messages), response=result.text,
            prompt_token_ids=result.prompt_token_ids, completion_token_ids=result.completion_token_ids,
            logprobs=result.logprobs, finish_reason=result.finish_reason,
            latency_ms=(time.perf_counter() - started) * 1000, sampling=asdict(sampling))
        episode.turns += 1
        episode.rounds[seat] = episode.rounds.get(seat, 0) + 1
        records: list[Any] = [record]
        if episode.standalone:
            self._forget(episode)
            records.append(_standalone_end(episode, result.finish_reason))
        await self.ledger.commit(*records)
        return record

    async def end(self, episode_id: str, status: EpisodeStatus, *, reward: float | None = None,
                  outcome: dict[str, Any] | None = None, error: str | None = None) -> int:
        """End an open episode (404 if there is none, 409 if it has ended); returns its number of turns."""
        episode = await self.open_episode(episode_id)
        await self._settle(episode)
        if self._open.get(episode_id) is not episode:  # ended meanwhile, or its end was stored before an outage
            await self.open_episode(episode_id)  # the 409 that says so
            raise GatewayError(409, f"episode {episode_id} is being ended by another request", "episode_ended",
                               "episode_id")
        self._forget(episode)
        stage = None if status == EpisodeStatus.SUCCEEDED else "client"
        try:
            await self.ledger.commit(EpisodeEnd(episode_id, status, reward, episode.turns, dict(outcome or {}),
                                                error=error, error_stage=stage))
        except GatewayError:
            self._keep(episode)  # the client may send its end again
            raise
        return episode.turns

    async def fail(self, episode: OpenEpisode, error: str) -> None:
        """End a one-turn episode whose call failed; a client's episode stays open for its next call."""
        if episode.standalone and self._open.get(episode.id) is episode:
            self._forget(episode)
            await self.ledger.commit(EpisodeEnd(episode.id, EpisodeStatus.FAILED, None, episode.turns,
                                                error=error, error_stage="client"))

    async def exists(self, episode_id: str) -> None:
        """404 unless the episode is open here or stored (ended episodes take rewards too)."""
        if episode_id not in self._open and await self._status(episode_id) is None:
            raise GatewayError(404, f"no episode {episode_id[:64]!r}", "episode_not_found", "episode_id")

    async def seat_of_turn(self, episode_id: str, turn_id: str, param: str) -> str:
        """The seat of turn ``turn_id``, which must be a turn of ``episode_id`` (404 or 400 otherwise)."""
        found = await self._read(turn_place, turn_id)
        if found is None:
            raise GatewayError(404, f"{param}: no turn {turn_id[:64]!r}", "turn_not_found", param)
        if found.episode_id != episode_id:
            raise GatewayError(400, f"{param}: turn {turn_id} is a turn of episode {found.episode_id}, not of "
                               f"{episode_id}: attach it to its own episode", "turn_of_another_episode", param)
        return found.seat

    async def reward(self, record: RewardRecord) -> None:
        await self._event(record.episode_id, record)

    async def judgment(self, record: JudgmentRecord) -> None:
        await self._event(record.episode_id, record)

    def close(self) -> int:
        """Mark the episodes no client ended as interrupted ones; returns how many."""
        self._open.clear()
        self._conversations.clear()
        return self.recorder.abort_running(self.run_id, INTERRUPTED)

    async def _event(self, episode_id: str, record: RewardRecord | JudgmentRecord) -> None:
        if (episode := self._open.get(episode_id)) is not None:
            await self._settle(episode)
        await self.ledger.commit(record)

    async def _settle(self, episode: OpenEpisode) -> None:
        """After an outage: take the episode's turn counts from the store, write its start again
        if the store lost it, and forget it if its end was stored (the 409 path of the caller)."""
        if episode.outages == self.ledger.outages:
            return
        async with self._settling:
            outages = self.ledger.outages
            if episode.outages == outages:
                return
            status, rounds = await self._read(episode_progress, episode.id)
            if status is None:
                await self.ledger.commit(episode.start)
            elif status != EpisodeStatus.RUNNING:
                self._forget(episode)
            episode.turns, episode.rounds, episode.outages = sum(rounds.values()), rounds, outages

    def _forget(self, episode: OpenEpisode) -> None:
        self._open.pop(episode.id, None)
        if episode.conversation is not None and self._conversations.get(episode.conversation) == episode.id:
            del self._conversations[episode.conversation]

    def _keep(self, episode: OpenEpisode) -> None:
        """Hold ``episode`` open again (its end was not stored)."""
        self._open[episode.id] = episode
        if episode.conversation is not None:
            self._conversations.setdefault(episode.conversation, episode.id)

    async def _status(self, episode_id: str) -> str | None:
        return await self._read(episode_status, episode_id)

    async def _read(self, read: Callable[[Engine, str], T], key: str) -> T:
        """``read(engine, key)``, once every record sent so far is written."""
        await self.ledger.commit()
        return await asyncio.to_thread(lambda: read(self.ledger.engine, key))


def _standalone_end(episode: OpenEpisode, finish_reason: str) -> EpisodeEnd:
    """A one-turn episode ends with its turn: failed as interrupted when its client went away."""
    if finish_reason == CANCELLED:
        return EpisodeEnd(episode.id, EpisodeStatus.FAILED, None, episode.turns, error=CLIENT_GONE,
                          error_stage=INTERRUPTED_STAGE)
    return EpisodeEnd(episode.id, EpisodeStatus.SUCCEEDED, None, episode.turns)


def _check_name(value: str, what: str) -> None:
    if not value or len(value) > NAME_LIMIT or not value.isprintable():
        raise GatewayError(400, f"the {what} must be 1 to {NAME_LIMIT} printable characters, got {value[:40]!r}",
                           "invalid_request", what)
