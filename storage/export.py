"""Exports of the logs to JSONL, Parquet and ``datasets.Dataset``, streamed chunk by chunk.

Two levels: ``episodes`` (one object per episode with its turns, rewards and judgments
nested, as ``queries.get_episode`` returns it) and ``turns`` (one flat row per turn with its
episode's columns, as ``queries.iter_turns`` yields it, and its rewards as columns).

A turn's rewards are one float column per reward name the exported turns have, named
``reward_<name>`` (``reward_correct``, ``reward_win``), null where a turn has none of that
name; of several events of one name on a turn, the last counts (as dataset builders read
them). Plain columns rather than one map column: ``df["reward_correct"].mean()`` and
``dataset.filter(lambda t: t["reward_win"] == 1)`` work as they are, where a map column
comes to pandas as lists of key/value pairs. The names are read before the rows, so every
row and every Parquet chunk of one export has the same columns.

JSONL keeps every value as logged, timestamps as ISO 8601 strings. Parquet and datasets use
a fixed Arrow schema, so that chunks and exports line up: free-form objects (task, seats,
outcome, sampling, reward info) are JSON strings there, messages are lists of
``{role, content}`` structs (TRL's conversational format; other message keys are not kept).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Engine, select

from storage.models import Reward
from storage.queries import EpisodeFilter, iter_episodes, iter_turns, turn_reward_names

Format = Literal["jsonl", "parquet"]
Level = Literal["episodes", "turns"]
FORMATS: tuple[Format, ...] = ("jsonl", "parquet")
LEVELS: tuple[Level, ...] = ("episodes", "turns")
CHUNK_ROWS = {"episodes": 200, "turns": 1000}
REWARD_PREFIX = "reward_"

_TS = pa.timestamp("us", tz="UTC")
_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
_TURN_FIELDS = [
    ("idx", pa.int32()),
    ("round", pa.int32()),
    ("seat", pa.string()),
    ("seat_kind", pa.string()),
    ("policy", pa.string()),
    ("served_by", pa.string()),
    ("backend", pa.string()),
    ("finish_reason", pa.string()),
    ("prompt_tokens", pa.int32()),
    ("completion_tokens", pa.int32()),
    ("latency_ms", pa.float64()),
    ("parsed", pa.bool_()),
    ("parsed_value", pa.string()),
    ("created_at", _TS),
    ("messages", pa.list_(_MESSAGE)),
    ("response", pa.string()),
    ("prompt_token_ids", pa.list_(pa.int64())),
    ("completion_token_ids", pa.list_(pa.int64())),
    ("logprobs", pa.list_(pa.float64())),
    ("sampling", pa.string()),
]
_EPISODE_FIELDS = [
    ("run_id", pa.string()),
    ("game", pa.string()),
    ("task_id", pa.string()),
    ("task_source", pa.string()),
    ("split", pa.string()),
    ("difficulty", pa.string()),
]
_REWARD = pa.struct(
    [
        ("id", pa.int64()),
        ("turn_id", pa.string()),
        ("seat", pa.string()),
        ("name", pa.string()),
        ("value", pa.float64()),
        ("info", pa.string()),
        ("created_at", _TS),
    ]
)
_JUDGMENT = pa.struct(
    [
        ("id", pa.int64()),
        ("judge_seat", pa.string()),
        ("judge_policy", pa.string()),
        ("judge_turn_id", pa.string()),
        ("winner_seat", pa.string()),
        ("loser_seat", pa.string()),
        ("preferred_turn_id", pa.string()),
        ("rejected_turn_id", pa.string()),
        ("rationale", pa.string()),
        ("rubric", pa.string()),
        ("score", pa.float64()),
        ("scored_seat", pa.string()),
        ("created_at", _TS),
    ]
)
TURNS_SCHEMA = pa.schema(
    [
        ("turn_id", pa.string()),
        ("episode_id", pa.string()),
        *_TURN_FIELDS,
        *_EPISODE_FIELDS,
        ("episode_seed", pa.int64()),
        ("episode_status", pa.string()),
        ("episode_reward", pa.float64()),
        ("num_turns", pa.int32()),
        ("error_stage", pa.string()),
        ("episode_started_at", _TS),
        ("episode_finished_at", _TS),
    ]
)
EPISODES_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        *_EPISODE_FIELDS,
        ("seed", pa.int64()),
        ("status", pa.string()),
        ("reward", pa.float64()),
        ("num_turns", pa.int32()),
        ("error_stage", pa.string()),
        ("started_at", _TS),
        ("finished_at", _TS),
        ("task", pa.string()),
        ("seats", pa.string()),
        ("outcome", pa.string()),
        ("error", pa.string()),
        ("turns", pa.list_(pa.struct([("id", pa.string()), *_TURN_FIELDS]))),
        ("rewards", pa.list_(_REWARD)),
        ("judgments", pa.list_(_JUDGMENT)),
    ]
)
SCHEMAS: dict[Level, pa.Schema] = {"episodes": EPISODES_SCHEMA, "turns": TURNS_SCHEMA}
"""The fixed columns; a turns export adds one ``reward_<name>`` column per reward name."""


def export(engine: Engine, flt: EpisodeFilter | None, path: str | Path, *, fmt: Format, level: Level) -> int:
    """Write the matching episodes or turns to ``path``; returns the number of rows written.

    The file appears only when complete (written beside it, then renamed).
    """
    _check_choice("fmt", fmt, FORMATS)
    _check_choice("level", level, LEVELS)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        rows, schema = _rows(engine, flt, level)
        count = _write_jsonl(rows, partial, level) if fmt == "jsonl" else _write_parquet(rows, schema, partial, level)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return count


def to_dataset(engine: Engine, flt: EpisodeFilter | None = None, level: Level = "turns") -> datasets.Dataset:
    """The matching turns (or episodes) as an in-memory ``datasets.Dataset`` (Parquet schema).

    For more rows than fit in memory, export to Parquet and load that file instead.
    """
    _check_choice("level", level, LEVELS)
    rows, schema = _rows(engine, flt, level)
    batches = [_record_batch(chunk, schema, level) for chunk in _chunks(rows, CHUNK_ROWS[level])]
    return datasets.Dataset(pa.Table.from_batches(batches, schema=schema))


def _chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterator[tuple[dict[str, Any], ...]]:
    """itertools.batched, which Python 3.11 lacks."""
    iterator = iter(rows)
    while chunk := tuple(islice(iterator, size)):
        yield chunk


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def _rows(engine: Engine, flt: EpisodeFilter | None, level: Level) -> tuple[Iterator[dict[str, Any]], pa.Schema]:
    """The rows to export and their Arrow schema."""
    if level == "episodes":
        return iter_episodes(engine, flt, chunk_size=CHUNK_ROWS[level]), EPISODES_SCHEMA
    names = turn_reward_names(engine, flt)
    columns = [f"{REWARD_PREFIX}{name}" for name in names]
    schema = pa.schema([*TURNS_SCHEMA, *(pa.field(column, pa.float64()) for column in columns)])
    return _with_rewards(engine, iter_turns(engine, flt, chunk_size=CHUNK_ROWS[level]), names), schema


def _with_rewards(engine: Engine, turns: Iterable[dict[str, Any]], names: list[str]) -> Iterator[dict[str, Any]]:
    """Each turn with a ``reward_<name>`` key per name (None where it has no such reward),
    read a chunk of turns at a time."""
    for chunk in _chunks(turns, CHUNK_ROWS["turns"]):
        given: dict[str, dict[str, float]] = {}
        if names:
            query = (
                select(Reward.turn_id, Reward.name, Reward.value)
                .where(Reward.turn_id.in_([turn["turn_id"] for turn in chunk]))
                .order_by(Reward.id)
            )
            with engine.connect() as conn:
                for turn_id, name, value in conn.execute(query):
                    given.setdefault(turn_id, {})[name] = value  # the last event of a name counts
        for turn in chunk:
            rewards = given.get(turn["turn_id"], {})
            yield {**turn, **{f"{REWARD_PREFIX}{name}": rewards.get(name) for name in names}}


def _write_jsonl(rows: Iterable[dict[str, Any]], path: Path, level: Level) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for chunk in _chunks(rows, CHUNK_ROWS[level]):
            out.write("".join(json.dumps(row, default=_json_default, ensure_ascii=False) + "\n" for row in chunk))
            count += len(chunk)
    return count


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write a {type(value).__name__} to JSON")


def _write_parquet(rows: Iterable[dict[str, Any]], schema: pa.Schema, path: Path, level: Level) -> int:
    count = 0
    with pq.ParquetWriter(path, schema) as writer:
        for chunk in _chunks(rows, CHUNK_ROWS[level]):
            writer.write_batch(_record_batch(chunk, schema, level))
            count += len(chunk)
    return count


def _record_batch(chunk: tuple[dict[str, Any], ...], schema: pa.Schema, level: Level) -> pa.RecordBatch:
    if level == "episodes":
        rows = [_episode_for_arrow(row) for row in chunk]
    else:
        rows = [_with_json(row, ("sampling",)) for row in chunk]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _episode_for_arrow(episode: dict[str, Any]) -> dict[str, Any]:
    episode = _with_json(episode, ("task", "seats", "outcome"))
    episode["turns"] = [_with_json(turn, ("sampling",)) for turn in episode["turns"]]
    episode["rewards"] = [_with_json(reward, ("info",)) for reward in episode["rewards"]]
    return episode


def _with_json(row: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A copy of ``row`` with the free-form objects under ``keys`` as JSON text."""
    row = dict(row)
    for key in keys:
        if row[key] is not None:
            row[key] = json.dumps(row[key], ensure_ascii=False)
    return row
