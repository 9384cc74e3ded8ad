"""Ingest throughput of the recorder against plain DBAPI ``executemany`` of the same rows.

N synthetic turns with their runs, episodes, rewards and judgments (bench/synthetic_records.py:
what `sparring play` sends, made before the clock starts) are written into an empty store,
a SQLite file and then a fresh PostgreSQL database each time, in two ways:

* recorder: sent through a real ``Recorder`` (default batch size) record by record, as the
  games send them; each run started and finished through it, as `sparring play` does; timed
  until the last run's end is committed;
* raw: the same records made into the final rows (an episode's start and end as one row,
  ``json.dumps`` for the JSON columns) and written with the DBAPI's ``executemany``
  (sqlite3, psycopg), one transaction per run of 256 episodes.

Both write the same tables with the same indexes over the same engine settings. Prints
turns/s of each and recorder / raw (best of --repeats each, alternated).

    python -m bench.store_ingest
    python -m bench.store_ingest --turns 20000 --repeats 1
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from bench.common import (
    add_postgres_argument,
    fresh_postgres_database,
    note,
    postgres_server,
    print_table,
)
from bench.synthetic_records import SyntheticRun, synthetic_runs
from bench.synthetic_store import postgres_timestamp, raw_rows, sqlite_timestamp
from storage.bench_rows import write_raw
from storage.engine import open_store
from storage.recorder import Recorder
from storage.records import EpisodeEnd, EpisodeStart, JudgmentRecord, RewardRecord, TurnRecord

EmptyStore = Callable[[], AbstractContextManager[str]]
"""Makes an empty store for one measurement and yields its URL."""
_SINK_METHOD = {
    EpisodeStart: Recorder.episode_started,
    TurnRecord: Recorder.turn,
    RewardRecord: Recorder.reward,
    JudgmentRecord: Recorder.judgment,
    EpisodeEnd: Recorder.episode_finished,
}


def through_recorder(url: str, runs: list[SyntheticRun]) -> float:
    """Seconds to record every run through a Recorder."""
    engine = open_store(url)
    try:
        started = time.perf_counter()
        with Recorder(engine) as recorder:
            for run in runs:
                recorder.start_run(run.run)
                for records in run.episodes:
                    for record in records:
                        _SINK_METHOD[type(record)](recorder, record)
                recorder.finish_run(run.run.id, "finished", {"episodes": len(run.episodes)})
        return time.perf_counter() - started
    finally:
        engine.dispose()


def raw_executemany(url: str, runs: list[SyntheticRun]) -> float:
    """Seconds to write the same rows with the DBAPI's executemany, a transaction per run."""
    engine = open_store(url)
    stamp = sqlite_timestamp if engine.dialect.name == "sqlite" else postgres_timestamp
    try:
        started = time.perf_counter()
        write_raw(engine, (raw_rows(run, stamp) for run in runs))
        return time.perf_counter() - started
    finally:
        engine.dispose()


@contextmanager
def sqlite_file() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="sparring-ingest-") as folder:
        yield f"sqlite:///{Path(folder) / 'store.db'}"


def best_rates(empty_store: EmptyStore, runs: list[SyntheticRun], turns: int, repeats: int) -> tuple[float, float]:
    """(raw turns/s, recorder turns/s), the best of ``repeats`` alternated runs of each."""
    best = {"raw": 0.0, "recorder": 0.0}
    for attempt in range(repeats):
        for name, write in (("raw", raw_executemany), ("recorder", through_recorder)):
            with empty_store() as url:
                rate = turns / write(url, runs)
            note(f"  {name} #{attempt + 1}: {rate:,.0f} turns/s")
            best[name] = max(best[name], rate)
    return best["raw"], best["recorder"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100_000,
                        help="turns to ingest, with their episodes (default 100,000)")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs of each writer (default 2)")
    add_postgres_argument(parser)
    args = parser.parse_args()

    note(f"generating {args.turns:,} synthetic turns")
    runs = list(synthetic_runs(args.turns))
    turns = sum(run.turns for run in runs)
    episodes = sum(len(run.episodes) for run in runs)
    records = sum(len(records) for run in runs for records in run.episodes)
    stores: list[tuple[str, EmptyStore]] = [("sqlite (file)", sqlite_file)]
    server = postgres_server(args.postgres_url)
    if server is not None:
        stores.append(("postgresql", lambda: fresh_postgres_database(server)))

    print(
        f"ingest of {turns:,} turns ({episodes:,} episodes, {records:,} records, {len(runs)} runs); "
        f"best of {args.repeats}"
    )
    rows = []
    for name, empty_store in stores:
        note(f"{name}:")
        raw, recorded = best_rates(empty_store, runs, turns, args.repeats)
        rows.append((name, turns, raw, recorded, f"{recorded / raw:.2f}x"))
    print_table(["store", "turns", "raw executemany turns/s", "recorder turns/s", "recorder/raw"], rows)


if __name__ == "__main__":
    main()
