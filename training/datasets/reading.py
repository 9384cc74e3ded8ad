"""Reading the logs for a dataset build: succeeded episodes, with the turns a builder needs,
their payloads and their rewards, streamed a chunk of episodes at a time.

Set-based: one query streams the selected episodes (oldest finish first); for each chunk of
them, one query reads their rewards, one their selected and judged turns joined to the
payloads, and (when asked) one their context turns and one their judgments. There is never a
query per turn or per episode. A turn whose payload row is missing is not read.

Which turns are read, for a ``ReadPlan`` with role R:

- *selected* turns: R's turns that pass the filter (policy label substring, and in
  ``turn_created_at`` mode the watermark). Builders make rows from these only.
- *context* turns of ``context_seats``: read whatever their policy or age, without their
  payload (no messages, no tokens), for credit rules that look at other seats' rewards.
- *judged* turns (``judged_turns``): the turns a judgment prefers or rejects, with payloads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement, Connection, Engine, Select, Text, and_, cast, exists, null, or_, select, type_coerce,
)
from sqlalchemy.types import Boolean

from storage.models import Episode, Judgment, Reward, Turn, TurnPayload
from storage.records import EpisodeStatus

_E = Episode.__table__
_T = Turn.__table__
_TP = TurnPayload.__table__
_R = Reward.__table__
_J = Judgment.__table__

WatermarkOn = Literal["episode_finished_at", "turn_created_at"]
WATERMARK_FIELDS: tuple[WatermarkOn, ...] = ("episode_finished_at", "turn_created_at")
DEFAULT_CHUNK_EPISODES = 256


@dataclass(frozen=True)
class LogFilter:
    """Which logs a build reads, beyond game and role (stored with each snapshot).

    ``policy``: a substring (case-insensitive, ``%`` and ``_`` literal) of the policy label or
    of the adapter that served the role's turns, e.g. ``"critic@v3"``. ``split``: the
    episodes' task split. ``watermark_on``: what the ``since`` watermark is compared with:

    - ``episode_finished_at`` (default): whole episodes that finished after it. An episode
      still running during a build is read in full by the next one.
    - ``turn_created_at``: the role's turns created after it (context turns are read at any
      age). An episode running during a build can then be split between two builds.
    """

    policy: str | None = None
    split: str | None = None
    watermark_on: WatermarkOn = "episode_finished_at"

    def __post_init__(self) -> None:
        if self.watermark_on not in WATERMARK_FIELDS:
            raise ValueError(f"watermark_on must be one of {', '.join(WATERMARK_FIELDS)}; got {self.watermark_on!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReadPlan:
    """What one build reads: see the module docstring for selected, context and judged turns."""

    game: str
    role: str
    filter: LogFilter = field(default_factory=LogFilter)
    since: datetime | None = None
    """exclusive lower bound on the watermark field; None reads everything"""
    context_seats: tuple[str, ...] = ()
    judged_turns: bool = False
    """also read judgments, and the turns they prefer or reject (with payloads)"""
    tokens: bool = False
    """read token ids and behaviour logprobs (the largest payload columns), as ``JSONNumbers``"""


@dataclass(frozen=True, slots=True)
class JSONNumbers:
    """A JSON array of numbers (token ids, logprobs) as the store holds it, not decoded.

    A PPO build copies these columns into its rows untouched: splicing the stored text skips
    a decode and an encode of the largest columns of the build (bench/dataset_build.py,
    50,000 turns, SQLite: build / plain SELECT 2.61x -> 1.4-1.5x)."""

    text: str

    def __len__(self) -> int:
        """The number of elements (numbers hold no commas, so this needs no decode)."""
        body = self.text.strip()
        return 0 if body in ("[]", "null", "") else body.count(",") + 1


@dataclass(frozen=True, slots=True)
class LoggedTurn:
    """A turn as builders see it. Payload fields are None for context turns, and token fields
    None unless the plan asked for tokens."""

    turn_id: str
    episode_id: str
    idx: int
    round: int
    seat: str
    policy: str
    served_by: str
    parsed: bool | None
    parsed_value: str | None
    created_at: datetime
    selected: bool
    """a turn of the plan's role that passed its filter: builders make rows from these only"""
    rewards: dict[str, float]
    """reward name -> value; of several events with one name, the latest recorded wins"""
    messages: list[dict[str, Any]] | None
    response: str | None
    prompt_token_ids: JSONNumbers | None
    completion_token_ids: JSONNumbers | None
    logprobs: JSONNumbers | None

    @property
    def prompt(self) -> list[dict[str, Any]]:
        """The prompt messages (for turns read with their payload)."""
        if self.messages is None:
            raise ValueError(f"turn {self.turn_id} was read without its payload; read it as a selected or judged turn")
        return self.messages

    @property
    def text(self) -> str:
        """The response (for turns read with their payload)."""
        if self.response is None:
            raise ValueError(f"turn {self.turn_id} was read without its payload; read it as a selected or judged turn")
        return self.response


@dataclass(frozen=True, slots=True)
class LoggedJudgment:
    judge_seat: str
    judge_policy: str
    winner_seat: str | None
    loser_seat: str | None
    preferred_turn_id: str | None
    rejected_turn_id: str | None
    rationale: str


@dataclass(frozen=True, slots=True)
class EpisodeLog:
    """A succeeded episode with the turns read for it (in play order) and its judgments."""

    episode_id: str
    game: str
    task_id: str
    difficulty: str | None
    split: str | None
    finished_at: datetime
    turns: list[LoggedTurn]
    judgments: list[LoggedJudgment]

    def turn(self, turn_id: str | None) -> LoggedTurn | None:
        return next((t for t in self.turns if t.turn_id == turn_id), None) if turn_id else None


def prompt_hash(messages: Sequence[dict[str, Any]]) -> str:
    """A digest of the exact prompt messages: two turns with the same digest saw the same state.
    (Keys and values joined with ASCII separators rather than canonical JSON: a build hashes
    every turn's prompt, and this is several times cheaper.)"""
    digest = hashlib.sha256()
    for message in messages:
        for key in sorted(message):
            digest.update(f"{key}\x1f{message[key]}\x1e".encode())
        digest.update(b"\x1d")
    return digest.hexdigest()[:32]


def read_episodes(
    engine: Engine, plan: ReadPlan, *, chunk_episodes: int = DEFAULT_CHUNK_EPISODES
) -> Iterator[EpisodeLog]:
    """The plan's succeeded episodes of ``plan.game``, oldest finish first, each with its turns
    read as the plan says. Episodes with no selected turn are left out."""
    if chunk_episodes < 1:
        raise ValueError(f"chunk_episodes must be >= 1, got {chunk_episodes}")
    # yield_per on the statement, not the connection: the chunk queries are read whole
    episodes = _episode_select(plan).execution_options(yield_per=chunk_episodes)
    with engine.connect() as conn:
        for rows in conn.execute(episodes).partitions():
            yield from _read_chunk(conn, plan, rows)


def _policy_matches(policy: str) -> ColumnElement[bool]:
    return _T.c.policy.icontains(policy, autoescape=True) | _T.c.served_by.icontains(policy, autoescape=True)


def _selected(plan: ReadPlan) -> ColumnElement[bool]:
    conditions = [_T.c.seat == plan.role]
    if plan.filter.policy is not None:
        conditions.append(_policy_matches(plan.filter.policy))
    if plan.since is not None and plan.filter.watermark_on == "turn_created_at":
        conditions.append(_T.c.created_at > plan.since)
    return and_(*conditions)


def _episode_select(plan: ReadPlan) -> Select[Any]:
    where: list[ColumnElement[bool]] = [_E.c.game == plan.game, _E.c.status == EpisodeStatus.SUCCEEDED.value]
    if plan.filter.split is not None:
        where.append(_E.c.split == plan.filter.split)
    if plan.since is not None:
        # in turn_created_at mode too: a turn is created before its episode finishes
        where.append(_E.c.finished_at > plan.since)
    where.append(exists().where(_T.c.episode_id == _E.c.id, _selected(plan)))
    return (
        select(_E.c.id, _E.c.game, _E.c.task_id, _E.c.difficulty, _E.c.split, _E.c.finished_at)
        .where(*where)
        .order_by(_E.c.finished_at, _E.c.id)
    )


def _read_chunk(conn: Connection, plan: ReadPlan, episode_rows: Sequence[Any]) -> list[EpisodeLog]:
    ids = [row.id for row in episode_rows]
    rewards: dict[str, dict[str, float]] = {}
    for turn_id, name, value in conn.execute(
        select(_R.c.turn_id, _R.c.name, _R.c.value)
        .where(_R.c.episode_id.in_(ids), _R.c.turn_id.is_not(None))
        .order_by(_R.c.id)
    ).all():
        rewards.setdefault(turn_id, {})[name] = value

    judgments: dict[str, list[LoggedJudgment]] = {}
    if plan.judged_turns:
        for row in conn.execute(select(_J).where(_J.c.episode_id.in_(ids)).order_by(_J.c.id)).all():
            judgments.setdefault(row.episode_id, []).append(
                LoggedJudgment(
                    row.judge_seat,
                    row.judge_policy,
                    row.winner_seat,
                    row.loser_seat,
                    row.preferred_turn_id,
                    row.rejected_turn_id,
                    row.rationale,
                )
            )

    judged = _named_turns(judgments)
    turns: dict[str, list[LoggedTurn]] = {}
    # columns in LoggedTurn's order, built positionally: this loop runs once per turn read
    for (
        turn_id,
        episode_id,
        *narrow,
        selected,
        messages,
        response,
        prompt_ids,
        completion_ids,
        logprobs,
    ) in conn.execute(_turn_select(plan, ids, judged)).all():
        turn = LoggedTurn(
            turn_id,
            episode_id,
            *narrow,
            bool(selected),
            rewards.get(turn_id, {}),
            messages,
            response,
            _numbers(prompt_ids),
            _numbers(completion_ids),
            _numbers(logprobs),
        )
        turns.setdefault(episode_id, []).append(turn)
    if plan.context_seats:
        for turn_id, episode_id, *narrow in conn.execute(_context_select(plan, ids, judged)).all():
            turn = LoggedTurn(turn_id, episode_id, *narrow, False, rewards.get(turn_id, {}), *_NO_PAYLOAD)
            turns.setdefault(episode_id, []).append(turn)
        for episode_turns in turns.values():
            episode_turns.sort(key=_play_order)

    return [
        EpisodeLog(
            episode_id=row.id,
            game=row.game,
            task_id=row.task_id,
            difficulty=row.difficulty,
            split=row.split,
            finished_at=row.finished_at,
            turns=turns.get(row.id, []),
            judgments=judgments.get(row.id, []),
        )
        for row in episode_rows
        if any(t.selected for t in turns.get(row.id, ()))
    ]


_NARROW = (
    _T.c.id,
    _T.c.episode_id,
    _T.c.idx,
    _T.c.round,
    _T.c.seat,
    _T.c.policy,
    _T.c.served_by,
    _T.c.parsed,
    _T.c.parsed_value,
    _T.c.created_at,
)
_NO_PAYLOAD = (None,) * 5


def _numbers(text: str | None) -> JSONNumbers | None:
    if text is None:
        return None
    return JSONNumbers(text.replace("\n", " ") if "\n" in text else text)  # rows are one line each


def _play_order(turn: LoggedTurn) -> int:
    return turn.idx


def _named_turns(judgments: dict[str, list[LoggedJudgment]]) -> set[str]:
    """The turns the chunk's judgments prefer or reject (ties name none)."""
    return {
        turn_id
        for episode_judgments in judgments.values()
        for j in episode_judgments
        for turn_id in (j.preferred_turn_id, j.rejected_turn_id)
        if turn_id is not None
    }


def _turn_select(plan: ReadPlan, episode_ids: list[str], judged: set[str]) -> Select[Any]:
    """The chunk's selected and ``judged`` turns with their payloads, in play order."""
    selected = _selected(plan)
    columns = (_TP.c.prompt_token_ids, _TP.c.completion_token_ids, _TP.c.logprobs)
    if plan.tokens:  # the stored JSON text, undecoded (JSONNumbers)
        tokens = tuple(cast(column, Text).label(column.name) for column in columns)
    else:
        tokens = tuple(null().label(column.name) for column in columns)
    return (
        select(*_NARROW, type_coerce(selected, Boolean).label("selected"), _TP.c.messages, _TP.c.response, *tokens)
        .select_from(_T.join(_TP, _TP.c.turn_id == _T.c.id))
        .where(_T.c.episode_id.in_(episode_ids), or_(selected, _T.c.id.in_(judged)) if judged else selected)
        .order_by(_T.c.episode_id, _T.c.idx)
    )


def _context_select(plan: ReadPlan, episode_ids: list[str], judged: set[str]) -> Select[Any]:
    """The chunk's context turns, without payloads (and without those the first query read)."""
    where = [_T.c.episode_id.in_(episode_ids), _T.c.seat.in_(plan.context_seats), _T.c.seat != plan.role]
    if judged:
        where.append(_T.c.id.not_in(judged))
    return select(*_NARROW).where(*where)
