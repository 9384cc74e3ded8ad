"""Stores full of synthetic logs (bench/synthetic_records.py), bulk-loaded, for the query and
dataset benchmarks; and the raw rows that the ingest benchmark writes with plain DBAPI inserts
(``storage.bench_rows.write_raw``) as its baseline.

``raw_rows`` turns a synthetic run into the final rows of each table (an episode's start and
end merged into one row), with JSON columns serialized as SQLAlchemy's JSON type does and
timestamps as each database stores them. A store is created by ``open_store`` (the real
migrations, so the real indexes), then filled with ``executemany`` (SQLite) or ``COPY``
(PostgreSQL, then VACUUM ANALYZE as autovacuum would do) one run at a time (storage.bench_rows),
its secondary indexes built at the end (on PostgreSQL also the indexes of the search table of migration
0006, which its trigger fills row by row: one GIN build over 1M turns is much cheaper than
keeping it up to date row by row).

``cached_sqlite_store`` keeps one file per size, seed, generator and schema version under
the cache folder (``$SPARRING_CACHE_DIR/bench``), so reruns skip the load; ``postgres_store``
loads a fresh database and drops it afterwards; ``bench_stores`` gives a benchmark both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from app import api
from bench.common import fresh_postgres_database, note, postgres_server, progress
from bench.synthetic_records import GENERATOR_VERSION, SyntheticRun, synthetic_runs
from storage.bench_rows import COLUMNS, Rows, build_indexes, bulk_writer, drop_indexes, settle
from storage.engine import open_store
from storage.migrate import head_revision
from storage.records import EpisodeEnd, JudgmentRecord, RewardRecord, TurnRecord

StoreFactory = Callable[[], AbstractContextManager["LoadedStore"]]


def sqlite_timestamp(value: datetime) -> str:
    """How SQLAlchemy stores a UTC datetime in SQLite."""
    return value.isoformat(" ", "microseconds")[:26]


def postgres_timestamp(value: datetime) -> datetime:
    return value


def raw_rows(run: SyntheticRun, stamp: Callable[[datetime], Any]) -> Rows:
    """The final rows of a run, per table in COLUMNS order."""
    dumps = json.dumps
    r = run.run
    rows: Rows = {table: [] for table in COLUMNS}
    rows["runs"].append(
        (r.id, r.game, dumps(r.config), r.seed, r.host, r.pid, "finished", dumps({"episodes": len(run.episodes)}),
         stamp(r.started_at), stamp(run.finished_at))
    )  # fmt: skip
    episodes, payloads = rows["episodes"], rows["episode_payloads"]
    turns, turn_payloads, rewards, judgments = rows["turns"], rows["turn_payloads"], rows["rewards"], rows["judgments"]
    for records in run.episodes:
        start, end = records[0], records[-1]
        if isinstance(end, EpisodeEnd):
            status, reward, num_turns, error_stage = str(end.status), end.reward, end.num_turns, end.error_stage
            finished_at, outcome, error = stamp(end.finished_at), end.outcome, end.error
        else:  # never ended: still running
            status, reward, num_turns, error_stage = "running", None, 0, None
            finished_at, outcome, error = None, None, None
        episodes.append(
            (start.id, start.run_id, start.game, start.task_id, start.task_source, start.split, start.difficulty,
             start.seed, status, reward, num_turns, error_stage, stamp(start.started_at), finished_at)
        )  # fmt: skip
        payloads.append((start.id, dumps(start.task), dumps(start.seats), dumps(outcome), error))
        for t in records[1:]:
            kind = type(t)
            if kind is TurnRecord:
                turns.append(
                    (t.id, t.episode_id, t.index, t.round, t.seat, t.seat_kind, t.policy, t.served_by, t.backend,
                     t.finish_reason, len(t.prompt_token_ids), len(t.completion_token_ids), t.latency_ms, t.parsed,
                     t.parsed_value, stamp(t.created_at))
                )  # fmt: skip
                turn_payloads.append(
                    (t.id, dumps(t.messages), t.response, dumps(t.prompt_token_ids), dumps(t.completion_token_ids),
                     dumps(t.logprobs), dumps(t.sampling))
                )  # fmt: skip
            elif kind is RewardRecord:
                rewards.append((t.episode_id, t.turn_id, t.seat, t.name, t.value, dumps(t.info), stamp(t.created_at)))
            elif kind is JudgmentRecord:
                judgments.append(
                    (t.episode_id, t.judge_seat, t.judge_policy, t.judge_turn_id, t.winner_seat, t.loser_seat,
                     t.preferred_turn_id, t.rejected_turn_id, t.rationale, stamp(t.created_at))
                )  # fmt: skip
    return rows


@dataclass(frozen=True)
class LoadedStore:
    url: str
    turns: int
    episodes: int


def load_store(url: str, n_turns: int, *, seed: int = 0) -> LoadedStore:
    """Migrate the empty store at ``url`` and fill it with ``n_turns`` synthetic turns. The
    secondary indexes are dropped during the load and built again at the end (the way bulk
    loads are done: much faster than keeping them up to date row by row)."""
    engine = open_store(url)
    turns = episodes = 0
    try:
        rebuild = drop_indexes(engine)
        with progress(f"loading {n_turns:,} synthetic turns", n_turns) as advance:
            for run in _loaded_runs(engine, synthetic_runs(n_turns, seed=seed)):
                turns, episodes = turns + run.turns, episodes + len(run.episodes)
                advance(run.turns)
        note(f"indexing {turns:,} turns")
        build_indexes(engine, rebuild)
        settle(engine)
    finally:
        engine.dispose()
    return LoadedStore(url, turns, episodes)


def _loaded_runs(engine: Engine, runs: Iterable[SyntheticRun]) -> Iterator[SyntheticRun]:
    """Write each run (one transaction each) and hand it on once committed."""
    stamp = sqlite_timestamp if engine.dialect.name == "sqlite" else postgres_timestamp
    with bulk_writer(engine) as write:
        for run in runs:
            write(raw_rows(run, stamp))
            yield run


def cached_sqlite_store(n_turns: int, cache_dir: Path, *, seed: int = 0) -> LoadedStore:
    """A SQLite store of ``n_turns`` synthetic turns, loaded once and then reused."""
    name = f"synthetic-{n_turns}-seed{seed}-gen{GENERATOR_VERSION}-schema{head_revision()}"
    path, counts = cache_dir / f"{name}.db", cache_dir / f"{name}.json"
    if path.is_file() and counts.is_file():
        note(f"using the cached store {path}")
        return LoadedStore(f"sqlite:///{path}", **json.loads(counts.read_text()))
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    for leftover in (partial, partial.with_name(f"{partial.name}-wal"), partial.with_name(f"{partial.name}-shm")):
        leftover.unlink(missing_ok=True)
    loaded = load_store(f"sqlite:///{partial}", n_turns, seed=seed)
    os.replace(partial, path)
    counts.write_text(json.dumps({"turns": loaded.turns, "episodes": loaded.episodes}))
    note(f"cached the store as {path}")
    return LoadedStore(f"sqlite:///{path}", loaded.turns, loaded.episodes)


@contextmanager
def postgres_store(server_url: str, n_turns: int, *, seed: int = 0) -> Iterator[LoadedStore]:
    """A fresh PostgreSQL database loaded with ``n_turns`` synthetic turns, dropped afterwards."""
    with fresh_postgres_database(server_url) as url:
        yield load_store(url, n_turns, seed=seed)


@contextmanager
def _cached_sqlite(n_turns: int) -> Iterator[LoadedStore]:
    yield cached_sqlite_store(n_turns, api.settings().cache_dir / "bench")


def bench_stores(n_turns: int, postgres_url: str | None) -> list[tuple[str, StoreFactory]]:
    """The stores a benchmark runs on: the cached SQLite file, then a loaded PostgreSQL
    database if the server can be used (otherwise a printed line says why it is skipped)."""
    stores: list[tuple[str, StoreFactory]] = [("sqlite (file)", lambda: _cached_sqlite(n_turns))]
    server = postgres_server(postgres_url)
    if server is not None:
        stores.append(("postgresql", lambda: postgres_store(server, n_turns)))
    return stores
