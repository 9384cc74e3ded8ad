"""Reading the logs for a dataset build: succeeded episodes, with the turns a builder needs,
their payloads and their rewards, streamed a chunk of episodes at a time.

The queries are ``storage.dataset_rows``' (set-based: never one query per turn or per
episode). A selected or judged turn whose payload row is missing is not read.
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
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Engine

from graphs.policies.base import CANCELLED
from storage.dataset_rows import LogChunk, LogSelection, log_chunks
from storage.records import JudgmentRecord
from training.datasets.errors import EvaluationDataError

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
    for chunk in log_chunks(engine, _selection(plan), chunk_episodes=chunk_episodes):
        yield from _episodes(chunk)


def _selection(plan: ReadPlan) -> LogSelection:
    return LogSelection(
        game=plan.game,
        role=plan.role,
        skip_finish_reason=CANCELLED,
        policy=plan.filter.policy,
        split=plan.filter.split,
        since=plan.since,
        watermark_on_turns=plan.filter.watermark_on == "turn_created_at",
        commits_before=None if plan.commits is None else plan.commits.before,
        commits_after=None if plan.commits is None else plan.commits.after,
        context_seats=plan.context_seats,
        judged_turns=plan.judged_turns,
        tokens=plan.tokens,
        tasks=plan.truths,
        seat_rewards=plan.seat_rewards,
    )


def _episodes(chunk: LogChunk) -> list[EpisodeLog]:
    judged = chunk.judged_turns
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
    ) in chunk.turns:
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

    answers = _answers(chunk.tasks)
    shared = _seat_rewards(chunk.seat_rewards)
    return [
        EpisodeLog(episode_id, game, task_id, difficulty, split, finished_at, turns[episode_id],
                   chunk.judgments.get(episode_id, []), answers.get(episode_id), shared.get(episode_id, {}))
        for episode_id, game, task_id, difficulty, split, finished_at, _ in chunk.episodes
        if episode_id in turns and any(t.selected for t in turns[episode_id])
    ]


def _answers(tasks: dict[str, Any]) -> dict[str, str]:
    """episode id -> its task's answer, for the episodes whose task has one."""
    return {
        episode_id: str(task["answer"])
        for episode_id, task in tasks.items()
        if isinstance(task, dict) and task.get("answer") is not None
    }


def _seat_rewards(events: list[tuple[str, str, str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """episode id -> seat -> reward name -> value (of several events with one name, the latest)."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for episode_id, seat, name, value in events:
        found.setdefault(episode_id, {}).setdefault(seat, {})[name] = value
    return found


def _numbers(text: str | None) -> JSONNumbers | None:
    if text is None:
        return None
    return JSONNumbers(text.replace("\n", " ") if "\n" in text else text)  # rows are one line each
