"""What dataset builds read and write in the store: the logs a build reads, a chunk of episodes
at a time, and the ``dataset_snapshots`` rows that register what was built.

Reading is set-based: one query streams the selected episodes (oldest finish first); for each
chunk of them, one query reads their turns with the payloads and rewards they need (and, when
asked, one query first reads their judgments, one their tasks, and one the rewards they were
given with no turn). There is never a query per turn or per episode. ``LogSelection`` says
which turns are *selected*, *context* or *judged* (``training.datasets.reading`` tells what
builders make of them).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    Select,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    false,
    insert,
    null,
    or_,
    select,
    type_coerce,
)
from sqlalchemy.types import Boolean

from storage.commits import horizon
from storage.models import DatasetSnapshot, TrainingJob
from storage.queries import SCRIPTED_BACKEND, policy_is
from storage.records import EpisodeStatus, JudgmentRecord
from storage.tables import EPISODE_PAYLOADS as _EP
from storage.tables import EPISODES as _E
from storage.tables import JUDGMENTS as _J
from storage.tables import REWARDS as _R
from storage.tables import SNAPSHOTS as _S
from storage.tables import TURN_PAYLOADS as _TP
from storage.tables import TURNS as _T


@dataclass(frozen=True)
class LogSelection:
    """Which logs a build reads.

    *Selected* turns: ``role``'s turns served by a model (never a scripted bot's) that did not
    end with ``skip_finish_reason``, of ``policy`` (``storage.queries.policy_is``) when given,
    and created after ``since`` when ``watermark_on_turns``. *Context* turns: those of
    ``context_seats``, read whatever their policy or age, without their payload. *Judged*
    turns (``judged_turns``): those a judgment prefers or rejects, with their payload. Only
    succeeded episodes of ``game`` that have a selected turn are read.
    """

    game: str
    role: str
    skip_finish_reason: str
    policy: str | None = None
    split: str | None = None
    """the episodes' task split; None: every split"""
    since: datetime | None = None
    """exclusive lower bound on the episodes' finish (and, ``watermark_on_turns``, on the
    selected turns' creation); None reads everything"""
    watermark_on_turns: bool = False
    commits_before: int | None = None
    """the episodes whose ending commit is numbered below this (``storage.commits``); None: any"""
    commits_after: int | None = None
    """with ``commits_before``: from this number on (inclusive); None: also the unnumbered ones"""
    context_seats: tuple[str, ...] = ()
    judged_turns: bool = False
    tokens: bool = False
    """read token ids and logprobs, as the JSON text the store holds"""
    tasks: bool = False
    """read each episode's task (``LogChunk.tasks``)"""
    seat_rewards: bool = False
    """read the rewards each episode was given with no turn (``LogChunk.seat_rewards``)"""


@dataclass(frozen=True)
class LogChunk:
    """One chunk of episodes and what was read for them."""

    episodes: Sequence[Row[Any]]
    """(id, game, task_id, difficulty, split, finished_at, judged) each, oldest finish first"""
    turns: Sequence[Row[Any]]
    """(id, episode_id, idx, round, seat, policy, served_by, parsed, parsed_value, created_at, selected,
    messages, response, prompt_token_ids, completion_token_ids, logprobs, reward name, reward value)
    each, in play order, one row per reward event of the turn (or one row without); the payload
    columns are None for context turns and for a turn whose payload row is missing, token columns
    None unless asked for, created_at None unless ``watermark_on_turns``"""
    judgments: dict[str, list[JudgmentRecord]]
    """episode id -> its judgments, in the order they were recorded"""
    judged_turns: set[str]
    """the turns the chunk's judgments prefer or reject (ties name none)"""
    tasks: dict[str, Any]
    """episode id -> its task, when asked for"""
    seat_rewards: list[tuple[str, str, str, float]]
    """(episode id, seat, name, value) of the rewards that name no turn, in event order, when asked for"""


def log_chunks(engine: Engine, selection: LogSelection, *, chunk_episodes: int) -> Iterator[LogChunk]:
    """The selected episodes, ``chunk_episodes`` at a time, with what was read for them."""
    # yield_per on the statement, not the connection: the chunk queries are read whole
    episodes = _episode_select(selection).execution_options(yield_per=chunk_episodes)
    # built once, executed per chunk: a chunk whose judgments name turns uses the second
    statements = (_turn_select(selection, judged=False), _turn_select(selection, judged=True))
    with engine.connect() as conn:
        for rows in conn.execute(episodes).partitions():
            yield _read_chunk(conn, statements, rows, selection)


def _read_chunk(
    conn: Connection, statements: tuple[Select[Any], Select[Any]], episode_rows: Sequence[Row[Any]],
    selection: LogSelection,
) -> LogChunk:
    ids = [row.id for row in episode_rows]
    with_judgments = [row.id for row in episode_rows if row.judged]
    judgments = _judgments(conn, with_judgments) if with_judgments else {}
    judged = _named_turns(judgments)
    if judged:
        statement, params = statements[1], {"episode_ids": ids, "judged": list(judged)}
    else:
        statement, params = statements[0], {"episode_ids": ids}
    return LogChunk(
        episodes=episode_rows,
        turns=conn.execute(statement, params).all(),
        judgments=judgments,
        judged_turns=judged,
        tasks=_tasks(conn, ids) if selection.tasks else {},
        seat_rewards=_seat_rewards(conn, ids) if selection.seat_rewards else [],
    )


def _selected(selection: LogSelection) -> ColumnElement[bool]:
    conditions = [_T.c.seat == selection.role, _T.c.backend != SCRIPTED_BACKEND,
                  _T.c.finish_reason != selection.skip_finish_reason]
    if selection.policy is not None:
        conditions.append(policy_is(selection.policy))
    if selection.since is not None and selection.watermark_on_turns:
        conditions.append(_T.c.created_at > selection.since)
    return and_(*conditions)


def _episode_select(selection: LogSelection) -> Select[Any]:
    where: list[ColumnElement[bool]] = [_E.c.game == selection.game, _E.c.status == EpisodeStatus.SUCCEEDED.value]
    if selection.split is not None:
        where.append(_E.c.split == selection.split)
    if selection.since is not None:
        # with the watermark on turns too: a turn is created before its episode finishes
        where.append(_E.c.finished_at > selection.since)
    if selection.commits_before is not None:
        numbered = _E.c.commit_seq < selection.commits_before
        if selection.commits_after is None:
            where.append(or_(numbered, _E.c.commit_seq.is_(None)))
        else:
            where.append(and_(numbered, _E.c.commit_seq >= selection.commits_after))
    where.append(exists().where(_T.c.episode_id == _E.c.id, _selected(selection)))
    # whether the episode has judgments: a chunk without any reads none (most games have no judge)
    judged = exists().where(_J.c.episode_id == _E.c.id) if selection.judged_turns else false()
    return (
        select(
            _E.c.id,
            _E.c.game,
            _E.c.task_id,
            _E.c.difficulty,
            _E.c.split,
            _E.c.finished_at,
            type_coerce(judged, Boolean).label("judged"),
        )
        .where(*where)
        .order_by(_E.c.finished_at, _E.c.id)
    )


def _tasks(conn: Connection, episode_ids: list[str]) -> dict[str, Any]:
    query = select(_EP.c.episode_id, _EP.c.task).where(_EP.c.episode_id.in_(episode_ids))
    return dict(conn.execute(query).tuples().all())


def _seat_rewards(conn: Connection, episode_ids: list[str]) -> list[tuple[str, str, str, float]]:
    query = (select(_R.c.episode_id, _R.c.seat, _R.c.name, _R.c.value)
             .where(_R.c.episode_id.in_(episode_ids), _R.c.turn_id.is_(None)).order_by(_R.c.id))
    return list(conn.execute(query).tuples().all())


_JUDGMENT_FIELDS = tuple(f.name for f in fields(JudgmentRecord))
"""the judgments table's columns, as the records the games wrote"""


def _judgments(conn: Connection, episode_ids: list[str]) -> dict[str, list[JudgmentRecord]]:
    judgments: dict[str, list[JudgmentRecord]] = {}
    for row in conn.execute(select(_J).where(_J.c.episode_id.in_(episode_ids)).order_by(_J.c.id)).all():
        judgments.setdefault(row.episode_id, []).append(
            JudgmentRecord(**{name: getattr(row, name) for name in _JUDGMENT_FIELDS})
        )
    return judgments


def _named_turns(judgments: dict[str, list[JudgmentRecord]]) -> set[str]:
    return {
        turn_id
        for episode_judgments in judgments.values()
        for j in episode_judgments
        for turn_id in (j.preferred_turn_id, j.rejected_turn_id)
        if turn_id is not None
    }


_NARROW = (_T.c.id, _T.c.episode_id, _T.c.idx, _T.c.round, _T.c.seat, _T.c.policy, _T.c.served_by, _T.c.parsed,
           _T.c.parsed_value)


def _turn_select(selection: LogSelection, *, judged: bool) -> Select[Any]:
    """The selected, context and (``judged``) judged turns of the chunk's episodes (parameter
    ``episode_ids``; the judged turns' ids: ``judged``): the columns of ``LogChunk.turns``."""
    selected = _selected(selection)
    is_judged = _T.c.id.in_(bindparam("judged", expanding=True)) if judged else false()
    context = (
        and_(_T.c.seat.in_(selection.context_seats), _T.c.seat != selection.role)
        if selection.context_seats else false()
    )
    columns = (_TP.c.prompt_token_ids, _TP.c.completion_token_ids, _TP.c.logprobs)
    if selection.tokens:  # the stored JSON text, undecoded
        tokens = tuple(cast(column, Text).label(column.name) for column in columns)
    else:
        tokens = tuple(null().label(column.name) for column in columns)
    created_at = _T.c.created_at if selection.watermark_on_turns else null()
    return (
        select(
            *_NARROW,
            created_at.label("created_at"),
            type_coerce(selected, Boolean).label("selected"),
            cast(_TP.c.messages, Text).label("messages"),
            _TP.c.response,
            *tokens,
            _R.c.name,
            _R.c.value,
        )
        .select_from(
            _T.outerjoin(_TP, and_(_TP.c.turn_id == _T.c.id, or_(selected, is_judged))).outerjoin(
                _R, _R.c.turn_id == _T.c.id
            )
        )
        .where(_T.c.episode_id.in_(bindparam("episode_ids", expanding=True)), or_(selected, context, is_judged))
        .order_by(_T.c.episode_id, _T.c.idx, _T.c.id, _R.c.id)
    )


def commit_horizon(engine: Engine) -> int:
    """The build horizon: every episode numbered below it is committed (``storage.commits.horizon``)."""
    with engine.connect() as conn:
        return horizon(conn)


def played_task_ids(engine: Engine, game: str, split: str) -> set[str]:
    """The ids of the tasks of ``split`` that episodes of ``game`` played."""
    with engine.connect() as conn:
        return set(conn.execute(
            select(_E.c.task_id).where(_E.c.game == game, _E.c.split == split).distinct()
        ).scalars())


# --- snapshots ------------------------------------------------------------------------------


def insert_snapshot(engine: Engine, row: dict[str, Any]) -> int:
    """Register a snapshot (``row``: its columns but the id); returns its id."""
    with engine.begin() as conn:
        return conn.execute(insert(DatasetSnapshot).values(**row).returning(DatasetSnapshot.id)).scalar_one()


def snapshot(engine: Engine, snapshot_id: int) -> dict[str, Any] | None:
    """The columns of snapshot ``snapshot_id``; None when there is none."""
    with engine.connect() as conn:
        row = conn.execute(select(_S).where(_S.c.id == snapshot_id)).mappings().one_or_none()
    return None if row is None else dict(row)


def snapshots_with_jobs(
    engine: Engine, *, kind: str | None = None, role: str | None = None, game: str | None = None
) -> list[dict[str, Any]]:
    """Snapshots, newest first, optionally of one kind, role and game: each its columns and
    ``jobs``, the (id, status) of each training job on it, oldest first."""
    query = select(_S).order_by(_S.c.created_at.desc(), _S.c.id.desc())
    for column, value in ((_S.c.kind, kind), (_S.c.role, role), (_S.c.game, game)):
        if value is not None:
            query = query.where(column == value)
    with engine.begin() as conn:
        snapshots = [dict(row) for row in conn.execute(query).mappings()]
        jobs: dict[int, list[tuple[int, str]]] = {}
        if snapshots:
            found = conn.execute(
                select(TrainingJob.dataset_snapshot_id, TrainingJob.id, TrainingJob.status)
                .where(TrainingJob.dataset_snapshot_id.in_([s["id"] for s in snapshots]))
                .order_by(TrainingJob.id)
            )
            for snapshot_id, job_id, status in found:
                jobs.setdefault(snapshot_id, []).append((job_id, status))
    return [{**s, "jobs": jobs.get(s["id"], [])} for s in snapshots]
