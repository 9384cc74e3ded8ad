"""The store benchmarks compare like with like: the rows their baselines and bulk loads write
are the rows the recorder writes (bench/store_ingest.py, bench/synthetic_store.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, delete

from bench.store_ingest import raw_executemany, through_recorder
from bench.synthetic_records import synthetic_runs
from bench.synthetic_store import load_store
from storage.bench_rows import COLUMNS
from storage.engine import open_store
from storage.models import Base
from storage.queries import iter_episodes


def _read_and_empty(url: str) -> list[dict[str, Any]]:
    """Every episode in full, without the autoincrement ids of rewards and judgments; then
    the store is emptied for the next writer."""
    engine: Engine = open_store(url)
    try:
        episodes = list(iter_episodes(engine))
        for episode in episodes:
            for event in (*episode["rewards"], *episode["judgments"]):
                del event["id"]
        with engine.begin() as conn:
            for table in reversed(COLUMNS):
                conn.execute(delete(Base.metadata.tables[table]))
    finally:
        engine.dispose()
    return episodes


def test_baseline_and_bulk_load_write_what_the_recorder_writes(store_url: str) -> None:
    runs = list(synthetic_runs(1500, seed=5))  # two runs: one of each game
    through_recorder(store_url, runs)
    recorded = _read_and_empty(store_url)
    raw_executemany(store_url, runs)
    raw = _read_and_empty(store_url)
    loaded = load_store(store_url, 1500, seed=5)  # executemany on SQLite, COPY on PostgreSQL
    bulk = _read_and_empty(store_url)

    assert loaded.turns == sum(len(e["turns"]) for e in recorded) >= 1500
    assert {e["status"] for e in recorded} >= {"succeeded", "failed", "running"}
    assert {e["game"] for e in recorded} == {"math-reflection", "debate"}
    assert raw == recorded
    assert bulk == recorded
