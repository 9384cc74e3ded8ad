"""How game records become table rows, and how a batch of them is written.

Kept lean on purpose: the recorder's throughput is bounded by this per-record Python work.
Each record becomes plain dicts (no ``dataclasses.asdict``, which deep-copies the payloads),
and each table gets one executemany insert per batch. An episode that starts and ends in the
same batch is inserted already ended; only the ends of episodes started in an earlier batch
become UPDATEs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, bindparam, insert, update

from storage.commits import stamp_ended
from storage.records import (
    EpisodeEnd,
    EpisodeStart,
    EpisodeStatus,
    JudgmentRecord,
    RewardRecord,
    TurnRecord,
    utcnow,
)
from storage.tables import EPISODE_PAYLOADS, EPISODES, JUDGMENTS, REWARDS, TURN_PAYLOADS, TURNS

INSERT_ORDER = (EPISODES, EPISODE_PAYLOADS, TURNS, TURN_PAYLOADS, REWARDS, JUDGMENTS)
"""Parents before children, so that foreign keys hold inside a batch."""

_END_EPISODE = (
    update(EPISODES)
    .where(EPISODES.c.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status"),
        reward=bindparam("b_reward"),
        num_turns=bindparam("b_num_turns"),
        error_stage=bindparam("b_error_stage"),
        finished_at=bindparam("b_finished_at"),
    )
)
_END_PAYLOAD = (
    update(EPISODE_PAYLOADS)
    .where(EPISODE_PAYLOADS.c.episode_id == bindparam("b_id"))
    .values(outcome=bindparam("b_outcome"), error=bindparam("b_error"))
)


@dataclass
class Rows:
    """A batch of records as rows: inserts per table (in enqueue order), then episode ends."""

    inserts: dict[Table, list[dict[str, Any]]] = field(default_factory=lambda: {t: [] for t in INSERT_ORDER})
    ends: list[EpisodeEnd] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    """every episode the batch ends (inserted ended or updated), numbered last (``storage.commits``)"""


def episode_of(record: Any) -> str:
    """The id of the episode a record belongs to."""
    return record.id if type(record) is EpisodeStart else record.episode_id


def to_rows(records: list[Any]) -> Rows:
    rows = Rows()
    inserts = rows.inserts
    episodes, episode_payloads = inserts[EPISODES], inserts[EPISODE_PAYLOADS]
    turns, turn_payloads = inserts[TURNS], inserts[TURN_PAYLOADS]
    started: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    """episode id -> its episode and payload rows, for the episodes started in this batch"""
    for r in records:
        kind = type(r)
        if kind is TurnRecord:
            turns.append(
                {
                    "id": r.id,
                    "episode_id": r.episode_id,
                    "idx": r.index,
                    "round": r.round,
                    "seat": r.seat,
                    "seat_kind": r.seat_kind,
                    "policy": r.policy,
                    "served_by": r.served_by,
                    "backend": r.backend,
                    "finish_reason": r.finish_reason,
                    "prompt_tokens": len(r.prompt_token_ids),
                    "completion_tokens": len(r.completion_token_ids),
                    "latency_ms": r.latency_ms,
                    "parsed": r.parsed,
                    "parsed_value": r.parsed_value,
                    "created_at": r.created_at,
                }
            )
            turn_payloads.append(
                {
                    "turn_id": r.id,
                    "messages": r.messages,
                    "response": r.response,
                    "prompt_token_ids": r.prompt_token_ids,
                    "completion_token_ids": r.completion_token_ids,
                    "logprobs": r.logprobs,
                    "sampling": r.sampling,
                }
            )
        elif kind is EpisodeStart:
            episode = {
                "id": r.id,
                "run_id": r.run_id,
                "game": r.game,
                "task_id": r.task_id,
                "task_source": r.task_source,
                "split": r.split,
                "difficulty": r.difficulty,
                "seed": r.seed,
                "status": EpisodeStatus.RUNNING.value,
                "reward": None,
                "num_turns": 0,
                "error_stage": None,
                "started_at": r.started_at,
                "finished_at": None,
            }
            payload = {"episode_id": r.id, "task": r.task, "seats": r.seats, "outcome": None, "error": None}
            episodes.append(episode)
            episode_payloads.append(payload)
            started[r.id] = (episode, payload)
        elif kind is RewardRecord:
            inserts[REWARDS].append(
                {
                    "episode_id": r.episode_id,
                    "turn_id": r.turn_id,
                    "seat": r.seat,
                    "name": r.name,
                    "value": r.value,
                    "info": r.info,
                    "created_at": r.created_at,
                }
            )
        elif kind is JudgmentRecord:
            inserts[JUDGMENTS].append(
                {
                    "episode_id": r.episode_id,
                    "judge_seat": r.judge_seat,
                    "judge_policy": r.judge_policy,
                    "judge_turn_id": r.judge_turn_id,
                    "winner_seat": r.winner_seat,
                    "loser_seat": r.loser_seat,
                    "preferred_turn_id": r.preferred_turn_id,
                    "rejected_turn_id": r.rejected_turn_id,
                    "rationale": r.rationale,
                    "rubric": r.rubric,
                    "score": r.score,
                    "scored_seat": r.scored_seat,
                    "created_at": r.created_at,
                }
            )
        elif kind is EpisodeEnd:
            rows.ended.append(r.episode_id)
            if r.episode_id in started:
                _end_in_place(r, *started[r.episode_id])
            else:
                rows.ends.append(r)
        else:
            raise TypeError(f"the recorder does not know how to store a {kind.__name__}")
    return rows


def _end_in_place(end: EpisodeEnd, episode: dict[str, Any], payload: dict[str, Any]) -> None:
    """What the episode-end UPDATEs would set, on rows not inserted yet."""
    episode.update(
        status=str(end.status),
        reward=end.reward,
        num_turns=end.num_turns,
        error_stage=end.error_stage,
        finished_at=end.finished_at,
    )
    payload.update(outcome=end.outcome, error=end.error)


def write_rows(conn: Connection, rows: Rows) -> int:
    """Insert, apply the episode ends, then number the ended episodes (``storage.commits``), in the
    caller's transaction; returns rows written."""
    written = 0
    for table, table_rows in rows.inserts.items():
        if table_rows:
            conn.execute(insert(table), table_rows)
            written += len(table_rows)
    if rows.ends:
        ends = rows.ends
        conn.execute(
            _END_EPISODE,
            [
                {
                    "b_id": e.episode_id,
                    "b_status": str(e.status),
                    "b_reward": e.reward,
                    "b_num_turns": e.num_turns,
                    "b_error_stage": e.error_stage,
                    "b_finished_at": e.finished_at,
                }
                for e in ends
            ],
        )
        conn.execute(_END_PAYLOAD, [{"b_id": e.episode_id, "b_outcome": e.outcome, "b_error": e.error} for e in ends])
        written += 2 * len(ends)
    stamp_ended(conn, rows.ended)  # last: its number stays locked until the commit
    return written


UNSTORED_STAGE = "recorder"
"""error_stage of an episode whose records the store refused"""


def fail_unstored(conn: Connection, episode_id: str, start: EpisodeStart | None, error: str, *, task: bool) -> int:
    """Mark an episode whose records the store refused as failed (error_stage "recorder");
    returns how many episodes were marked (0: no such episode).

    ``start``: its EpisodeStart, when it was among the refused records: the episode row is then
    inserted, with the start's task when ``task`` (else an empty one: the task may be what was
    refused). Otherwise the episode row already stored is updated."""
    finished = utcnow()
    if start is not None:
        inserts = to_rows([start]).inserts
        episode, payload = inserts[EPISODES][0], inserts[EPISODE_PAYLOADS][0]
        episode.update(status=EpisodeStatus.FAILED.value, error_stage=UNSTORED_STAGE, finished_at=finished)
        payload.update(error=error, task=start.task if task else {})
        conn.execute(insert(EPISODES), episode)
        conn.execute(insert(EPISODE_PAYLOADS), payload)
        return 1
    marked = conn.execute(
        update(EPISODES)
        .where(EPISODES.c.id == episode_id)
        .values(status=EpisodeStatus.FAILED.value, error_stage=UNSTORED_STAGE, finished_at=finished)
    )
    conn.execute(update(EPISODE_PAYLOADS).where(EPISODE_PAYLOADS.c.episode_id == episode_id).values(error=error))
    return marked.rowcount
