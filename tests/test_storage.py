"""Storage on real databases: schema, recorder, queries, exports and error messages.

Each store test runs on a SQLite file and on a fresh PostgreSQL database (see conftest.py).
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, event, func, inspect, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from factories import (
    T0,
    RecordedEpisode,
    episode_end,
    episode_start,
    new_id,
    record_episode,
    record_in_process,
    run_record,
    turn_record,
)
from storage.engine import DatabaseError, in_transaction, open_store, session_scope
from storage.export import export, to_dataset
from storage.migrate import alembic_config, current_revision, head_revision
from storage.migration_only import MIGRATION_ONLY_INDEXES, MIGRATION_ONLY_TABLES, include_object
from storage.models import (
    AdapterVersion,
    Base,
    DatasetKind,
    DatasetSnapshot,
    Episode,
    Evaluation,
    Run,
    TrainingJob,
    Turn,
)
from storage.orphans import ORPHAN_ERROR, end_runs, wait_for_local_processes
from storage.queries import EpisodeFilter, count_episodes_by_status, get_episode, iter_turns, list_episodes
from storage.recorder import NullRecorder, Recorder, mark_orphans
from storage.records import EpisodeStatus, RewardRecord

# --- schema -------------------------------------------------------------------------------


def _schema_diff(conn: Connection) -> list[object]:
    """What differs between the store and the models, leaving out only the migration-only search objects."""
    context = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": include_object})
    return compare_metadata(context, Base.metadata)


def _migration_only_objects(engine: Engine) -> set[str]:
    """The search objects of migrations 0003 and 0006 that the store holds (tables, and on PostgreSQL their indexes)."""
    found = inspect(engine)
    tables = set(found.get_table_names())
    indexes = {index["name"] for index in found.get_indexes("turn_search")} if "turn_search" in tables else set()
    return (tables & MIGRATION_ONLY_TABLES) | (indexes & MIGRATION_ONLY_INDEXES)


def test_migrated_schema_matches_models(store_url: str) -> None:
    engine = open_store(store_url)
    open_store(store_url).dispose()  # a second open finds the schema at head and changes nothing
    with engine.connect() as conn:
        diff = _schema_diff(conn)
        newest = max(p.name.split("_")[0] for p in (Path(__file__).parents[1] / "storage/migrations/versions")
                     .glob("[0-9]*.py"))
        assert current_revision(conn) == head_revision() == newest
    # the allow-list hides objects that are there, and only those
    expected = MIGRATION_ONLY_TABLES if engine.dialect.name == "sqlite" else {"turn_search", *MIGRATION_ONLY_INDEXES}
    assert _migration_only_objects(engine) == expected
    engine.dispose()
    assert diff == []


def test_schema_comparison_still_sees_what_the_allow_list_does_not_name(store: Engine) -> None:
    with store.begin() as conn:
        conn.execute(text("CREATE INDEX ix_turn_payloads_stray ON turn_payloads (response)"))
        conn.execute(text("CREATE TABLE turn_search_stray (id INTEGER PRIMARY KEY)"))
    with store.connect() as conn:
        diff = _schema_diff(conn)
    assert sorted((change[0], change[1].name) for change in diff) == [  # type: ignore[index, attr-defined]
        ("remove_index", "ix_turn_payloads_stray"), ("remove_table", "turn_search_stray")]


def test_migrations_run_from_a_url_and_downgrade(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    command.upgrade(alembic_config(url=store_url), "head")
    engine = open_store(store_url, migrate=False)
    with engine.connect() as conn:
        diff = _schema_diff(conn)
    searchable = _migration_only_objects(engine)
    command.downgrade(alembic_config(url=store_url), "0002")  # the search objects go with their migration
    after_0003 = _migration_only_objects(engine)
    command.downgrade(alembic_config(url=store_url), "base")
    left = set(inspect(engine).get_table_names())
    engine.dispose()
    assert diff == []
    assert searchable and after_0003 == set()
    assert left == {"alembic_version"}

    command.upgrade(alembic_config(url=store_url), "head", sql=True)  # offline: the DDL as text
    assert "CREATE TABLE turn_payloads" in capsys.readouterr().out


def test_store_from_a_newer_sparring_is_refused(store: Engine, store_url: str) -> None:
    with store.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(DatabaseError, match="newer version of sparring"):
        open_store(store_url)


def _adapter(version: int, **overrides: object) -> AdapterVersion:
    values: dict[str, object] = {
        "role": "critic",
        "version": version,
        "name": f"critic@v{version}",
        "base_model": "smollm2",
        "trainer": "dpo",
        "config": {"beta": 0.1},
        "path": f"/adapters/critic@v{version}",
    }
    return AdapterVersion(**{**values, **overrides})


def test_training_tables_via_session(store: Engine) -> None:
    with session_scope(store) as session:
        snapshot = DatasetSnapshot(
            kind=DatasetKind.DPO,
            role="critic",
            game="math-reflection",
            base_model="smollm2",
            filter_spec={"game": "math-reflection"},
            watermark=T0,
            row_count=120,
            path="/data/dpo-1.parquet",
        )
        session.add(snapshot)
        session.flush()
        v1 = _adapter(1, dataset_snapshot_id=snapshot.id)
        session.add(v1)
        session.flush()
        session.add(_adapter(2, parent_id=v1.id))
        session.add(TrainingJob(kind="dpo", role="critic", config={}, dataset_snapshot_id=snapshot.id))
        metrics = {"accuracy": 0.4}
        session.add(
            Evaluation(adapter_version_id=v1.id, game="g", split="test", n_tasks=50, seed=1, metrics=metrics)
        )

    with session_scope(store) as session:
        versions = session.scalars(select(AdapterVersion).order_by(AdapterVersion.version)).all()
        job = session.scalars(select(TrainingJob)).one()
        watermark = session.scalars(select(DatasetSnapshot.watermark)).one()
        evaluation = session.scalars(select(Evaluation)).one()
    assert [(v.name, v.status, v.parent_id) for v in versions] == [
        ("critic@v1", "candidate", None),
        ("critic@v2", "candidate", versions[0].id),
    ]
    assert job.status == "queued" and job.created_at.tzinfo is not None
    assert watermark == T0 and evaluation.metrics == metrics
    with pytest.raises(IntegrityError), session_scope(store) as session:  # (role, version) is unique
        session.add(_adapter(2, name="critic@v2-again"))


def test_sqlite_connections_use_wal_and_foreign_keys(tmp_path: Path) -> None:
    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    with engine.connect() as conn:
        names = ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
        pragmas = {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in names}
    engine.dispose()
    assert pragmas == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 30000, "synchronous": 1}


def test_postgres_connections_get_work_mem_for_search_and_keep_a_higher_one(postgres_url: str) -> None:
    """Below 64 MB a search's bitmap of matching pages goes lossy at 1M turns (12 s instead of
    0.9 s, bench/serve_pages.py); a connection asking for more keeps it."""
    for url, expected in ((postgres_url, "64MB"), (f"{postgres_url}?options=-c%20work_mem%3D200MB", "200MB")):
        engine = open_store(url)
        try:
            with engine.connect() as conn:
                conn.rollback()  # the pool's reset does this too: the setting outlives transactions
                assert conn.exec_driver_sql("SHOW work_mem").scalar() == expected
        finally:
            engine.dispose()


# --- recorder -----------------------------------------------------------------------------


def test_recorder_round_trip(store: Engine) -> None:
    with Recorder(store) as recorder:
        ep = record_episode(recorder, turns=3, reward=0.5)
    got = get_episode(store, ep.start.id)

    assert got["status"] == "succeeded" and got["reward"] == 0.5 and got["num_turns"] == 3
    assert got["task"] == ep.start.task and got["seats"] == ep.start.seats
    assert got["outcome"] == ep.end.outcome and got["error"] is None
    assert got["started_at"] == ep.start.started_at and got["started_at"].utcoffset() == timedelta(0)
    assert [t["id"] for t in got["turns"]] == [t.id for t in ep.turns]
    for stored, sent in zip(got["turns"], ep.turns, strict=True):
        assert stored["idx"] == sent.index and stored["seat"] == sent.seat
        assert stored["messages"] == sent.messages
        assert stored["prompt_token_ids"] == sent.prompt_token_ids
        assert stored["completion_token_ids"] == sent.completion_token_ids
        assert stored["logprobs"] == sent.logprobs  # exact floats
        assert stored["sampling"] == sent.sampling
        assert stored["prompt_tokens"] == len(sent.prompt_token_ids)
        assert stored["created_at"] == sent.created_at
        assert stored["parsed"] is True and stored["parsed_value"] == sent.parsed_value
    assert [(r["turn_id"], r["value"], r["info"]) for r in got["rewards"]] == [
        (r.turn_id, r.value, r.info) for r in ep.rewards
    ]
    judgment = got["judgments"][0]
    assert (judgment["preferred_turn_id"], judgment["rejected_turn_id"]) == (ep.turns[1].id, ep.turns[0].id)
    assert recorder.stats.records == 1 + 3 + 3 + 1 + 1 and recorder.stats.batches >= 1


def test_episode_without_end_stays_running(store: Engine) -> None:
    with Recorder(store, batch_size=3) as recorder:
        ended = record_episode(recorder, turns=4)
        unended = record_episode(recorder, turns=4, finished=False)
    assert get_episode(store, ended.start.id)["status"] == "succeeded"
    dangling = get_episode(store, unended.start.id)
    assert dangling["status"] == "running" and dangling["finished_at"] is None
    assert len(dangling["turns"]) == 4  # what was recorded is there, just not finished


def test_episode_end_is_committed_with_or_after_everything_before_it(store: Engine) -> None:
    # Batches of 2 split the episode's records over many transactions; the end comes last.
    with Recorder(store, batch_size=2, flush_interval_s=0) as recorder:
        ep = record_episode(
            recorder, turns=6, status=EpisodeStatus.FAILED, reward=None, error_stage="critic turn 5"
        )
    assert recorder.stats.batches > 1  # the episode's records did span several transactions
    got = get_episode(store, ep.start.id)
    assert (got["status"], got["reward"], got["error_stage"]) == ("failed", None, "critic turn 5")
    assert got["error"] == "failed at critic turn 5"
    assert len(got["turns"]) == 6 and len(got["rewards"]) == 6 and len(got["judgments"]) == 1
    assert recorder.stats.batches >= 7


def test_flush_makes_records_visible_and_close_is_idempotent(store: Engine) -> None:
    recorder = Recorder(store, flush_interval_s=10)  # only flush() commits before the interval
    ep = record_episode(recorder, turns=1)
    recorder.flush()
    assert get_episode(store, ep.start.id)["status"] == "succeeded"
    recorder.close()
    recorder.close()
    with pytest.raises(DatabaseError, match="closed"):
        recorder.turn(turn_record(ep.start.id, 1))


def test_a_record_the_store_refuses_costs_only_its_own_episode(store: Engine) -> None:
    recorder = Recorder(store)
    saved = record_episode(recorder, turns=1)
    recorder.flush()
    recorder.turn(turn_record("no-such-episode", 0))  # violates the turns -> episodes foreign key
    after = record_episode(recorder, turns=1)
    recorder.close()
    assert recorder.stats.dropped == 1 and recorder.stats.lost_episodes == 0  # no such episode to mark
    assert [get_episode(store, ep.start.id)["status"] for ep in (saved, after)] == ["succeeded"] * 2


def test_a_failing_store_is_surfaced(store: Engine) -> None:
    recorder = Recorder(store)
    saved = record_episode(recorder, turns=1)
    recorder.flush()
    with store.begin() as conn:  # the store takes nothing any more, not even a failed episode's mark
        conn.execute(text("DROP TABLE judgments"))
        conn.execute(text("DROP TABLE rewards"))
        conn.execute(text("DROP TABLE turn_payloads"))
        conn.execute(text("DROP TABLE turns"))
        conn.execute(text("DROP TABLE episode_payloads"))
        conn.execute(text("DROP TABLE episodes"))
    recorder.turn(turn_record(saved.start.id, 1))
    with pytest.raises(DatabaseError, match="could not save a batch of 1 records") as raised:
        recorder.flush()
    assert "turns" in str(raised.value)  # the driver's error names the missing table
    with pytest.raises(DatabaseError, match="could not save"):
        recorder.turn(turn_record(saved.start.id, 2))
    with pytest.raises(DatabaseError, match="could not save"):
        recorder.close()
    assert recorder.stats.dropped == 1


def test_finish_run_and_abort_running(store: Engine) -> None:
    run = run_record()
    with Recorder(store) as recorder:
        recorder.start_run(run)
        done = record_episode(recorder, run_id=run.id)
        playing = [record_episode(recorder, run_id=run.id, finished=False) for _ in range(2)]
        assert recorder.abort_running(run.id, "interrupted by Ctrl-C") == 2
        recorder.finish_run(run.id, "interrupted", {"episodes": 3})
        with pytest.raises(ValueError, match="status must be one of"):
            recorder.finish_run(run.id, "running", {})

    assert get_episode(store, done.start.id)["status"] == "succeeded"
    for ep in playing:
        got = get_episode(store, ep.start.id)
        assert (got["status"], got["error_stage"]) == ("failed", "interrupted")
        assert got["error"] == "interrupted by Ctrl-C"
        assert got["finished_at"] is not None
    with store.connect() as conn:
        status, summary = conn.execute(select(Run.status, Run.summary).where(Run.id == run.id)).one()
    assert (status, summary) == ("interrupted", {"episodes": 3})
    assert count_episodes_by_status(store, run.id) == {"succeeded": 1, "failed": 2}


def test_mark_orphans(store: Engine) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid now names no process
    dead_run, live_run, ended_run = run_record(pid=child.pid), run_record(), run_record()
    with Recorder(store) as recorder:
        for run in (dead_run, live_run, ended_run):
            recorder.start_run(run)
        dead = record_episode(recorder, run_id=dead_run.id, finished=False)
        dead_but_done = record_episode(recorder, run_id=dead_run.id)
        live = record_episode(recorder, run_id=live_run.id, finished=False)
        left_over = record_episode(recorder, run_id=ended_run.id, finished=False)
        recorder.finish_run(ended_run.id, "finished", {})

    assert mark_orphans(store) == 2
    for ep in (dead, left_over):
        got = get_episode(store, ep.start.id)
        assert (got["status"], got["error"]) == ("failed", ORPHAN_ERROR)
    assert get_episode(store, dead_but_done.start.id)["status"] == "succeeded"
    assert get_episode(store, live.start.id)["status"] == "running"
    with store.connect() as conn:
        assert conn.scalar(select(Run.status).where(Run.id == dead_run.id)) == "interrupted"
    assert mark_orphans(store) == 0


def test_waiting_for_the_processes_of_runs_on_this_host(store: Engine) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    alive, elsewhere = run_record(pid=child.pid), run_record(pid=child.pid, host="another-host")
    with Recorder(store) as recorder:
        recorder.start_run(alive)
        recorder.start_run(elsewhere)
    try:
        assert not wait_for_local_processes(store, [alive.id], timeout_s=0.2)
        assert wait_for_local_processes(store, [elsewhere.id], timeout_s=0)  # another host's: not waited for
    finally:
        child.kill()
        child.wait()
    assert wait_for_local_processes(store, [alive.id], timeout_s=5)
    assert wait_for_local_processes(store, [], timeout_s=0)


@pytest.mark.postgres
def test_an_episode_a_worker_starts_while_its_run_is_ended_is_never_failed_without_its_error(
        postgres_url: str) -> None:
    """A worker that is still alive commits a new episode while `--ray` ends its run: the
    episodes the marking picked fail with its error, and the late one is left running for the
    orphan sweep, never failed with no error (READ COMMITTED lets each statement see it)."""
    store, writer = open_store(postgres_url), open_store(postgres_url)
    run = run_record()
    late: list[RecordedEpisode] = []

    def start_one_more(conn: Connection, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("UPDATE EPISODE") and not late:  # the run is ended already
            with Recorder(writer) as other:
                late.append(record_episode(other, run_id=run.id, finished=False))

    with Recorder(store) as recorder:
        recorder.start_run(run)
        playing = record_episode(recorder, run_id=run.id, finished=False)
    event.listen(store, "after_cursor_execute", start_one_more)
    try:
        marked = end_runs(store, {run.id: "worker 0 died"})
    finally:
        event.remove(store, "after_cursor_execute", start_one_more)

    assert marked == 1 and late
    got = get_episode(store, playing.start.id)
    assert (got["status"], got["error"]) == ("failed", "interrupted: worker 0 died")
    assert get_episode(store, late[0].start.id)["status"] == "running"
    assert mark_orphans(store) == 1  # its run has ended: the sweep fails it with the orphan's error
    assert get_episode(store, late[0].start.id)["error"] == ORPHAN_ERROR
    store.dispose()
    writer.dispose()


def test_concurrent_recorders_in_processes(store_url: str) -> None:
    """Four processes migrate and write one store at once (SQLite: one file, WAL)."""
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=record_in_process, args=(store_url, w, 12)) for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]  # a "database is locked" would be 1
    engine = open_store(store_url)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Episode)) == 48
        assert conn.scalar(select(func.count()).select_from(Turn)) == 48 * 3
        assert conn.scalar(select(func.count()).where(Run.status == "finished")) == 4
    assert count_episodes_by_status(engine) == {"succeeded": 48}
    engine.dispose()


def test_opening_waits_while_another_process_writes_a_store_not_yet_in_wal_mode(tmp_path: Path) -> None:
    """SQLite refuses the switch to WAL at once, busy_timeout or not, while another connection
    holds a write lock on a rollback-mode file (as when another process is creating the store)."""
    path = tmp_path / "store.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE other_process (n INTEGER)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO other_process VALUES (1)")
    threading.Timer(0.3, writer.execute, args=("COMMIT",)).start()
    engine = open_store(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("SELECT count(*) FROM other_process").scalar() == 1
        assert current_revision(conn) == head_revision()
    engine.dispose()
    writer.close()


def test_recorder_reconnects_after_the_server_drops_its_connection(postgres_url: str) -> None:
    engine, other = open_store(postgres_url), open_store(postgres_url, migrate=False)
    with Recorder(engine) as recorder:
        first = record_episode(recorder)
        recorder.flush()  # the writer's connection is back in the pool, idle
        with other.connect() as conn:
            dropped = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
        second = record_episode(recorder)
    assert dropped >= 1
    assert [get_episode(engine, ep.start.id)["status"] for ep in (first, second)] == ["succeeded"] * 2
    engine.dispose()
    other.dispose()


def test_in_transaction_retries_only_transient_errors(store: Engine) -> None:
    attempts: list[int] = []

    def locked_twice(conn: Connection) -> int:
        attempts.append(1)
        if len(attempts) <= 2:
            raise OperationalError("INSERT ...", {}, Exception("database is locked"))
        return conn.execute(select(func.count()).select_from(Episode)).scalar_one()

    assert in_transaction(store, locked_twice) == 0 and len(attempts) == 3

    def broken(conn: Connection) -> None:
        attempts.append(1)
        conn.execute(text("INSERT INTO runs (id) VALUES ('x')"))  # violates NOT NULL: permanent

    attempts.clear()
    with pytest.raises(IntegrityError):
        in_transaction(store, broken)
    assert len(attempts) == 1

    def missing_table(conn: Connection) -> None:
        attempts.append(1)
        conn.execute(text("SELECT * FROM no_such_table"))  # SQLite calls this an OperationalError too

    attempts.clear()
    with pytest.raises(DBAPIError, match="no_such_table"):
        in_transaction(store, missing_table)
    assert len(attempts) == 1  # at once, not after the backoff's 5.5 s


def test_null_recorder_discards_everything() -> None:
    with NullRecorder() as recorder:
        record_episode(recorder)
        assert recorder.abort_running("run", "stop") == 0
    assert recorder.stats.records == 0


# --- queries ------------------------------------------------------------------------------


@pytest.fixture
def played(store: Engine) -> dict[str, RecordedEpisode]:
    """Six episodes, one minute apart, across two games, statuses, rewards, seats and policies."""
    run = run_record()
    with Recorder(store) as recorder:
        recorder.start_run(run)
        episodes = {
            "a": record_episode(recorder, minute=0, reward=1.0, run_id=run.id),
            "b": record_episode(recorder, minute=1, reward=0.0, status=EpisodeStatus.FAILED, run_id=run.id),
            "c": record_episode(recorder, minute=2, reward=0.5, turns=4, policy="critic@v3"),
            "d": record_episode(recorder, minute=3, game="debate", seats=("debater_a", "debater_b"), reward=0.25),
            "e": record_episode(recorder, minute=4, game="debate", seats=("debater_a",), turns=1, reward=None),
            "f": record_episode(recorder, minute=5, finished=False, split="test", task_id="gsm8k-0042"),
        }
    return episodes


def _ids(page_or_rows: object, episodes: dict[str, RecordedEpisode]) -> list[str]:
    names = {ep.start.id: name for name, ep in episodes.items()}
    items = page_or_rows.items if hasattr(page_or_rows, "items") else page_or_rows
    return [names[item["id"]] for item in items]


FILTER_CASES = [
    (EpisodeFilter(), "fedcba"),
    (EpisodeFilter(game="debate"), "ed"),
    (EpisodeFilter(status="failed"), "b"),
    (EpisodeFilter(status="running"), "f"),
    (EpisodeFilter(seat="debater_b"), "d"),
    (EpisodeFilter(seat="critic"), "fcba"),
    (EpisodeFilter(policy="critic@v3"), "c"),
    (EpisodeFilter(policy="critic@v"), ""),  # versions are matched exactly, never as a prefix or substring
    (EpisodeFilter(policy="%"), ""),
    (EpisodeFilter(split="test"), "f"),
    (EpisodeFilter(task_id="gsm8k-0042"), "f"),
    (EpisodeFilter(min_reward=0.25, max_reward=0.5), "dc"),
    (EpisodeFilter(min_reward=0.5), "ca"),
    (EpisodeFilter(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3)), "cb"),
    (EpisodeFilter(game="math-reflection", status="succeeded", min_reward=0.5), "ca"),
]


def test_list_episodes_filters(store: Engine, played: dict[str, RecordedEpisode]) -> None:
    # One store for all cases: creating a PostgreSQL database per case would dominate the run.
    got = {repr(flt): _ids(list_episodes(store, flt, limit=50), played) for flt, _ in FILTER_CASES}
    totals = {repr(flt): list_episodes(store, flt, limit=1).total for flt, _ in FILTER_CASES}
    assert got == {repr(flt): list(expected) for flt, expected in FILTER_CASES}
    assert totals == {repr(flt): len(expected) for flt, expected in FILTER_CASES}


def test_list_episodes_run_filter_sorting_and_paging(store: Engine, played: dict[str, RecordedEpisode]) -> None:
    run_id = played["a"].start.run_id
    assert "".join(_ids(list_episodes(store, EpisodeFilter(run_id=run_id)), played)) == "ba"

    assert "".join(_ids(list_episodes(store, sort="started_at"), played)) == "abcdef"
    # nulls (e's reward, f still running) sort last either way
    by_reward_desc, by_reward = (_ids(list_episodes(store, sort=s), played) for s in ("-reward", "reward"))
    assert ("".join(by_reward_desc[:4]), set(by_reward_desc[4:])) == ("acdb", {"e", "f"})
    assert ("".join(by_reward[:4]), set(by_reward[4:])) == ("bdca", {"e", "f"})
    assert _ids(list_episodes(store, sort="-num_turns"), played)[0] == "c"

    pages = [list_episodes(store, sort="started_at", limit=4, offset=offset) for offset in (0, 4, 8)]
    assert ["".join(_ids(p, played)) for p in pages] == ["abcd", "ef", ""]
    assert {p.total for p in pages} == {6}
    item = pages[0].items[0]
    assert item["seats"] == played["a"].start.seats and item["game"] == "math-reflection"

    with pytest.raises(ValueError, match=r"unknown sort key 'seed'.*-started_at.*reward"):
        list_episodes(store, sort="seed")


def test_list_episodes_keyset_paging(store: Engine, played: dict[str, RecordedEpisode]) -> None:
    # every sort, ties (game, num_turns) and nulls (reward) included: pages after the last id
    # of the previous one give the same order as one page of everything
    for flt in (EpisodeFilter(), EpisodeFilter(game="math-reflection")):
        for sort in ("-started_at", "started_at", "-reward", "reward", "-game", "num_turns", "finished_at"):
            everything = _ids(list_episodes(store, flt, sort=sort, limit=None), played)
            paged: list[str] = []
            page = list_episodes(store, flt, sort=sort, limit=2, count=False)
            while page.items:
                paged += _ids(page, played)
                page = list_episodes(store, flt, sort=sort, limit=2, after=page.items[-1]["id"], count=False)
            assert (sort, paged) == (sort, everything)
            assert page.total is None

    first = list_episodes(store, limit=2)
    second = list_episodes(store, limit=2, after=first.items[-1]["id"])
    assert "".join(_ids(second, played)) == "dc" and second.total == 6
    with pytest.raises(KeyError, match="no episode 'nope' to page after"):
        list_episodes(store, after="nope")


def test_get_episode_by_prefix(store: Engine) -> None:
    with Recorder(store) as recorder:
        first = record_episode(recorder, id="abc1" + new_id()[4:])
        record_episode(recorder, id="abc2" + new_id()[4:])
    assert get_episode(store, "abc1")["id"] == first.start.id
    assert get_episode(store, first.start.id)["task"] == first.start.task
    with pytest.raises(KeyError, match="several episode ids"):
        get_episode(store, "abc")
    with pytest.raises(KeyError, match="no episode id"):
        get_episode(store, "zzz")
    with pytest.raises(KeyError, match="no episode id"):
        get_episode(store, "abc_")  # "_" is not a LIKE wildcard here


def test_iter_turns_streams_flat_rows(store: Engine, played: dict[str, RecordedEpisode]) -> None:
    rows = list(iter_turns(store, EpisodeFilter(seat="critic"), chunk_size=2))
    expected = [t for name in "abcf" for t in played[name].turns if t.seat == "critic"]
    assert [r["turn_id"] for r in rows] == [t.id for t in expected]
    first = rows[0]
    assert first["episode_id"] == played["a"].start.id and first["game"] == "math-reflection"
    assert first["episode_status"] == "succeeded" and first["episode_reward"] == 1.0
    assert first["logprobs"] == expected[0].logprobs and first["messages"] == expected[0].messages
    assert len(list(iter_turns(store, EpisodeFilter(game="debate")))) == 3


# --- exports ------------------------------------------------------------------------------


def test_export_jsonl(store: Engine, played: dict[str, RecordedEpisode], tmp_path: Path) -> None:
    episodes_path, turns_path = tmp_path / "out" / "episodes.jsonl", tmp_path / "turns.jsonl"
    assert export(store, EpisodeFilter(game="debate"), episodes_path, fmt="jsonl", level="episodes") == 2
    assert export(store, None, turns_path, fmt="jsonl", level="turns") == 13

    episodes = [json.loads(line) for line in episodes_path.read_text().splitlines()]
    d = played["d"]
    assert [e["id"] for e in episodes] == [d.start.id, played["e"].start.id]
    assert episodes[0]["task"] == d.start.task and episodes[0]["started_at"] == d.start.started_at.isoformat()
    assert [t["completion_token_ids"] for t in episodes[0]["turns"]] == [t.completion_token_ids for t in d.turns]
    assert len(episodes[0]["rewards"]) == 2 and episodes[0]["judgments"][0]["winner_seat"] == "debater_b"

    turns = [json.loads(line) for line in turns_path.read_text().splitlines()]
    assert turns[0]["turn_id"] == played["a"].turns[0].id and turns[0]["logprobs"] == played["a"].turns[0].logprobs
    assert not list(tmp_path.rglob("*.partial"))


def test_export_parquet(store: Engine, played: dict[str, RecordedEpisode], tmp_path: Path) -> None:
    assert export(store, EpisodeFilter(), tmp_path / "episodes.parquet", fmt="parquet", level="episodes") == 6
    actor_turns = EpisodeFilter(seat="actor")
    assert export(store, actor_turns, tmp_path / "turns.parquet", fmt="parquet", level="turns") == 5

    episodes = pq.read_table(tmp_path / "episodes.parquet").to_pylist()
    c = played["c"]
    got = next(e for e in episodes if e["id"] == c.start.id)
    assert json.loads(got["task"]) == c.start.task and got["started_at"] == c.start.started_at
    assert [t["prompt_token_ids"] for t in got["turns"]] == [t.prompt_token_ids for t in c.turns]
    assert [t["logprobs"] for t in got["turns"]] == [t.logprobs for t in c.turns]
    assert json.loads(got["turns"][0]["sampling"]) == c.turns[0].sampling
    assert [json.loads(r["info"]) for r in got["rewards"]] == [r.info for r in c.rewards]
    assert next(e for e in episodes if e["id"] == played["f"].start.id)["status"] == "running"

    turns = pq.read_table(tmp_path / "turns.parquet").to_pylist()
    assert {t["seat"] for t in turns} == {"actor"}
    assert turns[0]["messages"] == played["a"].turns[0].messages
    assert turns[0]["episode_started_at"] == played["a"].start.started_at

    with pytest.raises(ValueError, match="fmt must be one of jsonl, parquet"):
        export(store, None, tmp_path / "x.csv", fmt="csv", level="turns")  # type: ignore[arg-type]


def test_turn_exports_carry_each_turns_rewards_as_columns(
    store: Engine, played: dict[str, RecordedEpisode], tmp_path: Path
) -> None:
    a, d = played["a"], played["d"]
    with Recorder(store) as recorder:  # more reward events: another name, a re-judged turn, a whole episode's
        recorder.reward(RewardRecord(d.start.id, "debater_b", "win", 1.0, d.turns[1].id, {}))
        recorder.reward(RewardRecord(a.start.id, "actor", "correct", 0.25, a.turns[0].id, {"rejudged": True}))
        recorder.reward(RewardRecord(a.start.id, "actor", "episode_bonus", 2.0, None, {}))
    expected = {t.id: {"reward_correct": float(i % 2), "reward_win": None} for ep in played.values()
                for i, t in enumerate(ep.turns)}
    expected[d.turns[1].id]["reward_win"] = 1.0
    expected[a.turns[0].id]["reward_correct"] = 0.25  # the last event of a name counts

    export(store, None, tmp_path / "turns.jsonl", fmt="jsonl", level="turns")
    export(store, None, tmp_path / "turns.parquet", fmt="parquet", level="turns")
    jsonl = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    frame = pq.read_table(tmp_path / "turns.parquet").to_pandas()
    for rows in (jsonl, frame.astype(object).where(frame.notna(), None).to_dict("records")):
        assert {r["turn_id"]: {k: r[k] for k in ("reward_correct", "reward_win")} for r in rows} == expected
    assert [c for c in frame.columns if c.startswith("reward_")] == ["reward_correct", "reward_win"]
    assert frame["reward_correct"].dtype == "float64"  # a column pandas computes on as it is
    assert frame.groupby("seat")["reward_win"].max()["debater_b"] == 1.0

    actor_only = to_dataset(store, EpisodeFilter(seat="actor"))  # only the names the exported turns have
    assert [c for c in actor_only.column_names if c.startswith("reward_")] == ["reward_correct"]
    assert sorted(actor_only["reward_correct"]) == [0.0, 0.0, 0.0, 0.0, 0.25]
    unrewarded = to_dataset(store, EpisodeFilter(game="chess"))
    assert len(unrewarded) == 0 and not [c for c in unrewarded.column_names if c.startswith("reward_")]


def test_to_dataset(store: Engine, played: dict[str, RecordedEpisode]) -> None:
    dataset = to_dataset(store, EpisodeFilter(game="math-reflection", status="succeeded"))
    assert len(dataset) == 2 + 4  # episodes a and c
    row = dataset[0]
    assert row["messages"] == played["a"].turns[0].messages  # TRL's conversational format
    assert row["completion_token_ids"] == played["a"].turns[0].completion_token_ids
    assert len(to_dataset(store, EpisodeFilter(game="chess"))) == 0
    assert len(to_dataset(store, level="episodes")) == 6


# --- error messages -----------------------------------------------------------------------


def test_malformed_url_says_what_a_url_looks_like() -> None:
    with pytest.raises(DatabaseError) as raised:
        open_store("not a url")
    assert str(raised.value) == (
        "SPARRING_DATABASE_URL='not a url' is not a database URL. "
        "Use sqlite:///path/to/file.db or postgresql+psycopg://user@host:5432/dbname"
    )


def test_unreachable_postgres_names_host_and_port() -> None:
    with pytest.raises(DatabaseError, match=r"at 127\.0\.0\.1:1: .*Start the server") as raised:
        open_store("postgresql://postgres@127.0.0.1:1/test")
    assert "postgresql+psycopg://postgres@127.0.0.1:1/test" in str(raised.value)


def test_unwritable_sqlite_path(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    with pytest.raises(DatabaseError, match="is a file, so it cannot hold the SQLite database .* in a folder"):
        open_store(f"sqlite:///{not_a_folder / 'store.db'}")
    with pytest.raises(DatabaseError, match=r"the folder .*missing' of the SQLite database .* does not exist: "
                                            r"create it \(mkdir -p"):
        open_store(f"sqlite:///{tmp_path / 'missing' / 'store.db'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing was created
    with pytest.raises(DatabaseError, match="cannot open the SQLite database .*unable to open database file"):
        open_store(f"sqlite:///{tmp_path}")  # a folder, not a file


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "in-memory SQLite database"),
        ("postgresql+pg8000://u@localhost/db", r"not installed .*install the Python package 'pg8000', or use "
                                               r"the driver sparring installs: postgresql\+psycopg://"),
        ("oracle+nosuchdriver://u@h/db", "unknown database kind"),
    ],
)
def test_other_url_errors(url: str, message: str) -> None:
    with pytest.raises(DatabaseError, match=message):
        open_store(url)


def test_unknown_episode_end_status_fails_in_the_caller(store: Engine) -> None:
    with Recorder(store) as recorder:
        start = episode_start()
        recorder.episode_started(start)
        with pytest.raises(ValueError, match="'done' is not a valid EpisodeStatus"):
            recorder.episode_finished(episode_end(start.id, status="done"))
    assert get_episode(store, start.id)["status"] == "running"


def test_two_stores_sharing_a_data_dir_keep_their_own_folders(tmp_path, monkeypatch):
    """Each store's snapshots and adapter versions go under a folder of its own, named by where the
    store lives (never by the user or password of its URL)."""
    from app.settings import Settings
    from storage.engine import store_key

    monkeypatch.chdir(tmp_path)
    one = Settings(database_url="sqlite:///a/store.db", data_dir=tmp_path / "data")
    other = Settings(database_url="sqlite:///b/store.db", data_dir=tmp_path / "data")
    assert one.store_dir != other.store_dir and one.store_dir.parent == tmp_path / "data" / "stores"
    assert one.store_dir.name.startswith("store-")
    assert store_key("sqlite:///a/store.db") == store_key(f"sqlite:///{tmp_path}/a/store.db")  # one file, one key
    pg = store_key("postgresql+psycopg://me:secret@db.example:5432/runs")
    assert pg == store_key("postgresql+psycopg://other@db.example:5432/runs") and "secret" not in pg
    assert pg != store_key("postgresql+psycopg://me@db.example:5432/runs2") and pg.startswith("runs-")
