"""The SQL of the benchmarks (bench/): bulk loads of ready-made rows, with plain DBAPI inserts
(``executemany``) or PostgreSQL ``COPY``, the secondary indexes dropped during a load and built
again after it; and the reads and clean-ups the benchmarks take their baselines and figures from.

Rows are tuples in the order of ``COLUMNS``, their JSON columns serialized and their timestamps
as each database stores them (what bench/synthetic_store.py makes of synthetic records).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, Index, delete, func, select, text

from storage.migration_only import MIGRATION_ONLY_INDEXES
from storage.models import Base, DatasetSnapshot, Episode, Reward, Run, Turn, TurnPayload
from storage.orphans import INTERRUPTED_STAGE
from storage.records import EpisodeStatus
from storage.tables import EPISODE_PAYLOADS as _EP
from storage.tables import EPISODES as _E
from storage.tables import TURNS as _T

Rows = dict[str, list[tuple[Any, ...]]]
COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("id", "game", "config", "seed", "host", "pid", "status", "summary", "started_at", "finished_at"),
    "episodes": (
        "id", "run_id", "game", "task_id", "task_source", "split", "difficulty", "seed", "status", "reward",
        "num_turns", "error_stage", "started_at", "finished_at",
    ),
    "episode_payloads": ("episode_id", "task", "seats", "outcome", "error"),
    "turns": (
        "id", "episode_id", "idx", "round", "seat", "seat_kind", "policy", "served_by", "backend", "finish_reason",
        "prompt_tokens", "completion_tokens", "latency_ms", "parsed", "parsed_value", "created_at",
    ),
    "turn_payloads": (
        "turn_id", "messages", "response", "prompt_token_ids", "completion_token_ids", "logprobs", "sampling",
    ),
    "rewards": ("episode_id", "turn_id", "seat", "name", "value", "info", "created_at"),
    "judgments": (
        "episode_id", "judge_seat", "judge_policy", "judge_turn_id", "winner_seat", "loser_seat",
        "preferred_turn_id", "rejected_turn_id", "rationale", "created_at",
    ),
}  # fmt: skip
"""Table -> the columns written, in foreign-key order (autoincrement ids left to the database)."""



def insert_sql(table: str, placeholder: str) -> str:
    """``placeholder``: the DBAPI's, ``?`` (sqlite3) or ``%s`` (psycopg)."""
    columns = COLUMNS[table]
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([placeholder] * len(columns))})"


def executemany_rows(cursor: Any, placeholder: str, rows: Rows) -> None:
    for table, table_rows in rows.items():
        if table_rows:
            cursor.executemany(insert_sql(table, placeholder), table_rows)


def write_raw(engine: Engine, batches: Iterable[Rows]) -> None:
    """Each batch of rows with the DBAPI's executemany on one raw connection, committed on its
    own: the baseline the recorder's ingest is measured against."""
    placeholder = "?" if engine.dialect.name == "sqlite" else "%s"
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        for rows in batches:
            executemany_rows(cursor, placeholder, rows)
            connection.commit()
    finally:
        connection.close()


def copy_rows(cursor: Any, rows: Rows) -> None:
    """PostgreSQL COPY through a psycopg cursor."""
    for table, table_rows in rows.items():
        if table_rows:
            with cursor.copy(f"COPY {table} ({', '.join(COLUMNS[table])}) FROM STDIN") as copy:
                for row in table_rows:
                    copy.write_row(row)


@contextmanager
def bulk_writer(engine: Engine) -> Iterator[Callable[[Rows], None]]:
    """A writer of Rows on one DBAPI connection, each call its own committed transaction:
    ``executemany`` on SQLite (with ``synchronous=OFF``: a store loaded for a benchmark is
    thrown away on a crash), ``COPY`` on PostgreSQL."""
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            cursor.execute("PRAGMA synchronous=OFF")  # this connection only

        def write(rows: Rows) -> None:
            if sqlite:
                executemany_rows(cursor, "?", rows)
            else:
                copy_rows(cursor, rows)
            connection.commit()

        yield write
    finally:
        connection.close()


def _indexes() -> list[Index]:
    """The secondary indexes of the tables a load writes, as the models declare them."""
    return [index for table in COLUMNS for index in Base.metadata.tables[table].indexes]


def drop_indexes(engine: Engine) -> list[str]:
    """Drop the secondary indexes of the tables a load writes (on PostgreSQL also those only
    migrations create: storage.migration_only); returns the statements that build the latter
    again, for ``build_indexes``. SQLite's search index is tables its triggers fill."""
    with engine.begin() as conn:
        for index in _indexes():
            index.drop(conn)
        return _drop_migration_only_indexes(conn)


def build_indexes(engine: Engine, rebuild: Sequence[str]) -> None:
    """Build again the indexes ``drop_indexes`` dropped (``rebuild``: what it returned)."""
    with engine.begin() as conn:
        for index in _indexes():
            index.create(conn)
        for statement in rebuild:
            conn.exec_driver_sql(statement)


def _drop_migration_only_indexes(conn: Connection) -> list[str]:
    if conn.dialect.name != "postgresql":
        return []
    found = conn.execute(
        text("SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(:names)"),
        {"names": sorted(MIGRATION_ONLY_INDEXES)},
    ).all()
    for name, _ in found:
        conn.exec_driver_sql(f'DROP INDEX "{name}"')
    return [definition for _, definition in found]


def settle(engine: Engine) -> None:
    """After a load. SQLite: fold the write-ahead log into the file. PostgreSQL: what autovacuum
    would do, statistics for the planner and a visibility map for index-only scans."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    else:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")


def episode_count(engine: Engine, status: str | None = None) -> int:
    """How many episodes the store holds (of ``status``, when given)."""
    where = [] if status is None else [_E.c.status == status]
    with engine.connect() as conn:
        return conn.scalar(select(func.count(_E.c.id)).where(*where))


def interrupted_count(engine: Engine) -> int:
    """How many episodes were marked failed as interrupted (a stopped command's)."""
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).where(_E.c.status == EpisodeStatus.FAILED.value,
                                                      _E.c.error_stage == INTERRUPTED_STAGE))


def first_run_status(engine: Engine) -> str | None:
    """The status of a run of the store (of its only one, in a store of one command's run)."""
    with engine.connect() as conn:
        return conn.scalar(select(Run.status))


def episodes_and_turn_seats(engine: Engine) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    """Every episode (its columns and seats), and every episode's seats that played a turn: what a
    full scan reads to filter in Python."""
    every_episode = select(*_E.columns, _EP.c.seats).select_from(_E.outerjoin(_EP, _EP.c.episode_id == _E.c.id))
    seats: dict[str, set[str]] = {}
    with engine.connect() as conn:
        for episode_id, seat in conn.execute(select(_T.c.episode_id, _T.c.seat)):
            seats.setdefault(episode_id, set()).add(seat)
        rows = [row._asdict() for row in conn.execute(every_episode)]
    return rows, seats


def count_turn_rows(engine: Engine, *, game: str, seat: str, tokens: bool) -> int:
    """Fetch, in one query, every row a dataset build of ``seat``'s turns in the succeeded
    episodes of ``game`` reads from: the turns, their messages and responses (with ``tokens``,
    their token ids and logprobs too) and their rewards; returns how many."""
    payload = [TurnPayload.messages, TurnPayload.response]
    if tokens:
        payload += [TurnPayload.prompt_token_ids, TurnPayload.completion_token_ids, TurnPayload.logprobs]
    stmt = (
        select(Turn.id, Turn.episode_id, Turn.idx, Turn.seat, *payload, Reward.name, Reward.value)
        .join(TurnPayload, TurnPayload.turn_id == Turn.id)
        .join(Episode, Episode.id == Turn.episode_id)
        .outerjoin(Reward, Reward.turn_id == Turn.id)
        .where(Episode.game == game, Episode.status == EpisodeStatus.SUCCEEDED.value, Turn.seat == seat)
        .execution_options(yield_per=2000)
    )
    rows = 0
    with engine.connect() as conn:
        for chunk in conn.execute(stmt).partitions():
            rows += len(chunk)
    return rows


def delete_snapshots(engine: Engine, base_model: str) -> None:
    """Unregister the dataset snapshots built for ``base_model`` (their files are left)."""
    with engine.begin() as conn:
        conn.execute(delete(DatasetSnapshot).where(DatasetSnapshot.base_model == base_model))


def turn_messages(engine: Engine, episode_ids: list[str]) -> list[tuple[str, int, list[dict[str, Any]]]]:
    """(episode id, turn index, prompt messages) of every turn of the episodes ``episode_ids``."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Turn.episode_id, Turn.idx, TurnPayload.messages)
            .join(TurnPayload, TurnPayload.turn_id == Turn.id)
            .where(Turn.episode_id.in_(episode_ids))
        ).all()
    return [(episode_id, idx, messages) for episode_id, idx, messages in rows]
