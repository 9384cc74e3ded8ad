"""Reading the logs for a dataset build: succeeded episodes, with the turns a builder needs,
their payloads and their rewards, streamed a chunk of episodes at a time.

Set-based: one query streams the selected episodes (oldest finish first); for each chunk of
them, one query reads their turns with the payloads and rewards they need (and, when asked,
one query first reads their judgments, one their tasks' answers, and one the rewards they were
given with no turn). There is never a query
per turn or per episode. A selected or judged turn whose payload row is missing is not read.
Prompt messages stay the JSON text the store holds until a builder asks for them: most read
turns make no row.

Which turns are read, for a ``ReadPlan`` with role R:

- *selected* turns: R's turns served by a model (never a scripted bot's: their token ids are
  bytes and their logprobs 0) that pass the filter (the exact policy, and in
  ``turn_created_at`` mode the watermark). Builders make rows from these only.
- *context* turns of ``context_seats``: read whatever their policy or age, without their
  payload (no messages, no tokens), for credit rules that look at other seats' rewards.
- *judged* turns (``judged_turns``): the turns a judgment prefers or rejects, with payloads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement, Connection, Engine, Select, Text, and_, bindparam, cast, exists, false, null, or_, select,
    type_coerce,
)
from sqlalchemy.types import Boolean

from graphs.policies.base import CANCELLED
from storage.models import Episode, EpisodePayload, Judgment, Reward, Turn, TurnPayload
from storage.queries import SCRIPTED_BACKEND, policy_is
from storage.records import EpisodeStatus, JudgmentRecord
from training.datasets.errors import EvaluationDataError

_E = Episode.__table__
_EP = EpisodePayload.__table__
_T = Turn.__table__
_TP = TurnPayload.__table__
_R = Reward.__table__
_J = Judgment.__table__

WatermarkOn = Literal["episode_finished_at", "turn_created_at"]
WATERMARK_FIELDS: tuple[WatermarkOn, ...] = ("episode_finished_at", "turn_created_at")
DEFAULT_CHUNK_EPISODES = 256
TRAIN_SPLIT = "train"


@dataclass(frozen=True)
class LogFilter:
    """Which logs a build reads, beyond game and role (stored with each snapshot).

    ``policy``: the policy that played the role's turns, matched exactly
    (``storage.queries.policy_is``): an adapter version (``"critic@v3"``), ``"base"`` (no
    adapter) or a whole policy label. ``split``: the
    episodes' task split, ``train`` only unless ``evaluation_data`` (any other split, or None
    for every split, is evaluation data: training on it makes every later figure measured on
    it worthless). ``watermark_on``: what the ``since`` watermark is compared with:

    - ``episode_finished_at`` (default): whole episodes that finished after it. An episode
      still running during a build is read in full by the next one.
    - ``turn_created_at``: the role's turns created after it (context turns are read at any
      age). An episode running during a build can then be split between two builds.
    """

    policy: str | None = None
    split: str | None = TRAIN_SPLIT
    watermark_on: WatermarkOn = "episode_finished_at"
    evaluation_data: bool = False
    """allow a split other than ``train``"""

    def __post_init__(self) -> None:
        if self.watermark_on not in WATERMARK_FIELDS:
            raise ValueError(f"watermark_on must be one of {', '.join(WATERMARK_FIELDS)}; got {self.watermark_on!r}")
        if self.split != TRAIN_SPLIT and not self.evaluation_data:
            which = "every split" if self.split is None else f"split {self.split!r}"
            raise EvaluationDataError(
                f"refusing to build training rows from {which}: only split 'train' is training data; "
                "'eval' (task files) and 'heldout' (the gate's problems) are evaluation data, and training on "
                "them makes every later figure measured on them worthless. Force it with evaluation_data=True "
                "(`sparring datasets build --train-on-eval-data`)."
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Commits:
    """Episodes by the number of the commit that ended them (``storage.commits``): from ``after``
    (inclusive; None: episodes numbered or not, the latter logged before commits were numbered)
    up to ``before``, the build's horizon (exclusive)."""

    before: int
    after: int | None = None


@dataclass(frozen=True)
class ReadPlan:
    """What one build reads: see the module docstring for selected, context and judged turns."""

    game: str
    role: str
    filter: LogFilter = field(default_factory=LogFilter)
    since: datetime | None = None
    """exclusive lower bound on the watermark field; None reads everything"""
    commits: Commits | None = None
    """which episodes by the number of the commit that ended them (None: any)"""
    context_seats: tuple[str, ...] = ()
    judged_turns: bool = False
    """also read judgments, and the turns they prefer or reject (with payloads)"""
    tokens: bool = False
    """read token ids and behaviour logprobs (the largest payload columns), as ``JSONNumbers``"""
    truths: bool = False
    """read each episode's ground truth (its task's answer) into ``EpisodeLog.truth``"""
    seat_rewards: bool = False
    """read the rewards each episode was given for a seat with no turn into ``EpisodeLog.seat_rewards``"""


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


@dataclass(slots=True)
class LoggedTurn:
    """A turn as builders see it. Payload fields are None for context turns, and token fields
    None unless the plan asked for tokens. (Not frozen, like ``EpisodeLog``: a build makes one
    per turn read, and a frozen dataclass's ``__init__`` costs three times as much.)"""

    turn_id: str
    episode_id: str
    idx: int
    round: int
    seat: str
    policy: str
    served_by: str
    parsed: bool | None
    parsed_value: str | None
    created_at: datetime | None
    """read only when the build's watermark is on turns (``turn_created_at``): parsing a
    timestamp per turn read is a tenth of a build that does not need it"""
    selected: bool
    """a turn of the plan's role that passed its filter: builders make rows from these only"""
    rewards: dict[str, float]
    """reward name -> value; of several events with one name, the latest recorded wins"""
    prompt_json: str | None
    """the prompt messages as the store holds them (JSON text): see ``prompt`` and ``prompt_key``"""
    response: str | None
    prompt_token_ids: JSONNumbers | None
    completion_token_ids: JSONNumbers | None
    logprobs: JSONNumbers | None

    @property
    def messages(self) -> list[dict[str, Any]] | None:
        """The prompt messages, decoded; None for a turn read without its payload."""
        return None if self.prompt_json is None else json.loads(self.prompt_json)

    @property
    def prompt(self) -> list[dict[str, Any]]:
        """The prompt messages (for turns read with their payload)."""
        return json.loads(self._prompt_json())

    @property
    def prompt_key(self) -> str:
        """A digest of the exact stored prompt: two turns with the same key saw the same state.
        (The store writes every prompt with one serializer, so equal messages are equal text.)"""
        return hashlib.blake2b(self._prompt_json().encode(), digest_size=16).hexdigest()

    def _prompt_json(self) -> str:
        if self.prompt_json is None:
            raise ValueError(f"turn {self.turn_id} was read without its payload; read it as a selected or judged turn")
        return self.prompt_json

    @property
    def text(self) -> str:
        """The response (for turns read with their payload)."""
        if self.response is None:
            raise ValueError(f"turn {self.turn_id} was read without its payload; read it as a selected or judged turn")
        return self.response


@dataclass(slots=True)
class EpisodeLog:
    """A succeeded episode with the turns read for it (in play order) and its judgments."""

    episode_id: str
    game: str
    task_id: str
    difficulty: str | None
    split: str | None
    finished_at: datetime
    turns: list[LoggedTurn]
    judgments: list[JudgmentRecord]
    truth: str | None = None
    """the task's answer, read when the plan asks (``ReadPlan.truths``); None without one"""
    seat_rewards: dict[str, dict[str, float]] = field(default_factory=dict)
    """seat -> reward name -> value, of the rewards given to the episode with no turn (the latest
    of one name wins), read when the plan asks (``ReadPlan.seat_rewards``)"""

    def turn(self, turn_id: str | None) -> LoggedTurn | None:
        return next((t for t in self.turns if t.turn_id == turn_id), None) if turn_id else None


def read_episodes(
    engine: Engine, plan: ReadPlan, *, chunk_episodes: int = DEFAULT_CHUNK_EPISODES
) -> Iterator[EpisodeLog]:
    """The plan's succeeded episodes of ``plan.game``, oldest finish first, each with its turns
    read as the plan says. Episodes with no selected turn are left out."""
    if chunk_episodes < 1:
        raise ValueError(f"chunk_episodes must be >= 1, got {chunk_episodes}")
    # yield_per on the statement, not the connection: the chunk queries are read whole
    episodes = _episode_select(plan).execution_options(yield_per=chunk_episodes)
    # built once, executed per chunk: a chunk whose judgments name turns uses the second
    statements = (_turn_select(plan, judged=False), _turn_select(plan, judged=True))
    with engine.connect() as conn:
        for rows in conn.execute(episodes).partitions():
            yield from _read_chunk(conn, statements, rows, truths=plan.truths, seat_rewards=plan.seat_rewards)


def _selected(plan: ReadPlan) -> ColumnElement[bool]:
    conditions = [_T.c.seat == plan.role, _T.c.backend != SCRIPTED_BACKEND, _T.c.finish_reason != CANCELLED]
    if plan.filter.policy is not None:
        conditions.append(policy_is(plan.filter.policy))
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
    if plan.commits is not None:
        numbered = _E.c.commit_seq < plan.commits.before
        if plan.commits.after is None:
            where.append(or_(numbered, _E.c.commit_seq.is_(None)))
        else:
            where.append(and_(numbered, _E.c.commit_seq >= plan.commits.after))
    where.append(exists().where(_T.c.episode_id == _E.c.id, _selected(plan)))
    # whether the episode has judgments: a chunk without any reads none (most games have no judge)
    judged = exists().where(_J.c.episode_id == _E.c.id) if plan.judged_turns else false()
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


def _read_chunk(
    conn: Connection, statements: tuple[Select[Any], Select[Any]], episode_rows: Sequence[Any], *, truths: bool,
    seat_rewards: bool,
) -> list[EpisodeLog]:
    ids = [row.id for row in episode_rows]
    answers = _truths(conn, ids) if truths else {}
    shared = _seat_rewards(conn, ids) if seat_rewards else {}
    with_judgments = [row.id for row in episode_rows if row.judged]
    judgments = _judgments(conn, with_judgments) if with_judgments else {}
    judged = _named_turns(judgments)
    if judged:
        statement, params = statements[1], {"episode_ids": ids, "judged": list(judged)}
    else:
        statement, params = statements[0], {"episode_ids": ids}
    turns: dict[str, list[LoggedTurn]] = {}
    last_id: str | None = None
    rewards: dict[str, float] = {}
    # a turn comes as one row per reward event, in event order (the latest wins); columns in
    # LoggedTurn's order, built positionally: this loop runs once per row read
    for (
        turn_id,
        episode_id,
        *narrow,
        selected,
        prompt_json,
        response,
        prompt_ids,
        completion_ids,
        logprobs,
        reward_name,
        reward_value,
    ) in conn.execute(statement, params).all():
        if turn_id != last_id:
            last_id, rewards = turn_id, {}
            if response is None and (selected or turn_id in judged):
                continue  # its payload row is missing
            turn = LoggedTurn(
                turn_id,
                episode_id,
                *narrow,
                bool(selected),
                rewards,
                prompt_json,
                response,
                _numbers(prompt_ids),
                _numbers(completion_ids),
                _numbers(logprobs),
            )
            turns.setdefault(episode_id, []).append(turn)
        if reward_name is not None:
            rewards[reward_name] = reward_value

    return [
        EpisodeLog(episode_id, game, task_id, difficulty, split, finished_at, turns[episode_id],
                   judgments.get(episode_id, []), answers.get(episode_id), shared.get(episode_id, {}))
        for episode_id, game, task_id, difficulty, split, finished_at, _ in episode_rows
        if episode_id in turns and any(t.selected for t in turns[episode_id])
    ]


def _truths(conn: Connection, episode_ids: list[str]) -> dict[str, str]:
    """episode id -> its task's answer, for the episodes whose task has one."""
    query = select(_EP.c.episode_id, _EP.c.task).where(_EP.c.episode_id.in_(episode_ids))
    return {
        episode_id: str(task["answer"])
        for episode_id, task in conn.execute(query).all()
        if isinstance(task, dict) and task.get("answer") is not None
    }


def _seat_rewards(conn: Connection, episode_ids: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """episode id -> seat -> reward name -> value, of the rewards that name no turn (in event order)."""
    query = (select(_R.c.episode_id, _R.c.seat, _R.c.name, _R.c.value)
             .where(_R.c.episode_id.in_(episode_ids), _R.c.turn_id.is_(None)).order_by(_R.c.id))
    found: dict[str, dict[str, dict[str, float]]] = {}
    for episode_id, seat, name, value in conn.execute(query).all():
        found.setdefault(episode_id, {}).setdefault(seat, {})[name] = value
    return found


_JUDGMENT_FIELDS = tuple(f.name for f in fields(JudgmentRecord))
"""the judgments table's columns, as the records the games wrote"""


def _judgments(conn: Connection, episode_ids: list[str]) -> dict[str, list[JudgmentRecord]]:
    judgments: dict[str, list[JudgmentRecord]] = {}
    for row in conn.execute(select(_J).where(_J.c.episode_id.in_(episode_ids)).order_by(_J.c.id)).all():
        judgments.setdefault(row.episode_id, []).append(
            JudgmentRecord(**{name: getattr(row, name) for name in _JUDGMENT_FIELDS})
        )
    return judgments


_NARROW = (_T.c.id, _T.c.episode_id, _T.c.idx, _T.c.round, _T.c.seat, _T.c.policy, _T.c.served_by, _T.c.parsed,
           _T.c.parsed_value)


def _numbers(text: str | None) -> JSONNumbers | None:
    if text is None:
        return None
    return JSONNumbers(text.replace("\n", " ") if "\n" in text else text)  # rows are one line each


def _named_turns(judgments: dict[str, list[JudgmentRecord]]) -> set[str]:
    """The turns the chunk's judgments prefer or reject (ties name none)."""
    return {
        turn_id
        for episode_judgments in judgments.values()
        for j in episode_judgments
        for turn_id in (j.preferred_turn_id, j.rejected_turn_id)
        if turn_id is not None
    }


def _turn_select(plan: ReadPlan, *, judged: bool) -> Select[Any]:
    """The selected, context and (``judged``) judged turns of the chunk's episodes (parameter
    ``episode_ids``; the judged turns' ids: ``judged``) in play order, one row per reward event
    (or one without), with payloads for the selected and judged turns only."""
    selected = _selected(plan)
    is_judged = _T.c.id.in_(bindparam("judged", expanding=True)) if judged else false()
    context = and_(_T.c.seat.in_(plan.context_seats), _T.c.seat != plan.role) if plan.context_seats else false()
    columns = (_TP.c.prompt_token_ids, _TP.c.completion_token_ids, _TP.c.logprobs)
    if plan.tokens:  # the stored JSON text, undecoded (JSONNumbers)
        tokens = tuple(cast(column, Text).label(column.name) for column in columns)
    else:
        tokens = tuple(null().label(column.name) for column in columns)
    created_at = _T.c.created_at if plan.filter.watermark_on == "turn_created_at" else null()
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
