"""`episodes list` on a store of 1M logged turns: filtered, paged SQL against a full scan.

The store holds N synthetic turns (bench/synthetic_store.py: about 4 turns per episode, two
games, several runs, roles, statuses and rewards); SQLite is cached per size, PostgreSQL is
loaded into a fresh database and dropped afterwards.

The query is what `sparring episodes list --game math-reflection --status succeeded --seat
critic --limit 50 --page P` runs: ``storage.queries.list_episodes``, newest first, for the
first page, the next one and a deep one; each page is reached by an offset with the total
counted (what the command does), or by keyset (after the last id of the previous page)
without a total. The baseline reads every episode (with its seats, as the page has them)
and the seat of every turn, then filters and sorts in Python (a page is then a slice); each
page of the query is checked to be the same as the baseline's. Each figure is the median
of --repeats runs after one warm-up run, so both read from a warm cache.

    python -m bench.query_paging                       # 1,000,000 turns
    python -m bench.query_paging --turns 50000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine

from bench.common import add_postgres_argument, note, print_table
from bench.synthetic_store import LoadedStore, bench_stores
from storage.bench_rows import episodes_and_turn_seats
from storage.engine import open_store
from storage.queries import EpisodeFilter, list_episodes

T = TypeVar("T")

FILTER = EpisodeFilter(game="math-reflection", status="succeeded", seat="critic")
LIMIT = 50
DEEP_PAGE = 200
"""the deep page measured (or the last full page of a smaller store)"""


def full_scan(engine: Engine, flt: EpisodeFilter) -> list[dict[str, Any]]:
    """Every episode and every turn's seat read, then filtered and sorted newest first in Python."""
    rows, seats = episodes_and_turn_seats(engine)
    matching = [
        r for r in rows if r["game"] == flt.game and r["status"] == flt.status and flt.seat in seats.get(r["id"], ())
    ]
    matching.sort(key=lambda r: (r["started_at"], r["id"]), reverse=True)
    return matching


def median_s(work: Callable[[], T], repeats: int) -> tuple[float, T]:
    """Median wall seconds of ``repeats`` runs after a warm-up, and what the last run returned."""
    result = work()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def measure(name: str, store: LoadedStore, repeats: int) -> list[tuple[object, ...]]:
    engine = open_store(store.url)
    try:
        note(f"{name}: full scan")
        scan_s, matching = median_s(lambda: full_scan(engine, FILTER), repeats)
        rows: list[tuple[object, ...]] = []
        deep = max(2, min(DEEP_PAGE, len(matching) // LIMIT))
        queries = ((1, "offset"), (2, "offset"), (2, "keyset"), (deep, "offset"), (deep, "keyset"))
        for page, how in queries:  # offset with the total, as `episodes list --page P`; keyset without
            offset = (page - 1) * LIMIT
            note(f"{name}: page {page} by {how}")
            if how == "offset":
                paged_s, got = median_s(lambda: list_episodes(engine, FILTER, limit=LIMIT, offset=offset), repeats)
            else:
                after = matching[offset - 1]["id"]
                paged_s, got = median_s(
                    lambda: list_episodes(engine, FILTER, limit=LIMIT, after=after, count=False), repeats
                )
            expected = [r["id"] for r in matching[offset : offset + LIMIT]]
            if [r["id"] for r in got.items] != expected or got.total not in (None, len(matching)):
                raise SystemExit(f"{name}: page {page} of list_episodes differs from the full scan's")
            total = "not counted" if got.total is None else "counted"
            label = f"page {page}, {how}"
            rows.append((name, store.turns, label, total, 1000 * paged_s, 1000 * scan_s, f"{scan_s / paged_s:,.0f}x"))
        return rows
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1_000_000, help="turns in the store (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=5, help="median of this many runs of each query (default 5)")
    add_postgres_argument(parser)
    args = parser.parse_args()

    stores = bench_stores(args.turns, args.postgres_url)
    print(
        f"episodes list --game {FILTER.game} --status {FILTER.status} --seat {FILTER.seat} --limit {LIMIT} "
        f"(newest first) vs a full scan; median of {args.repeats}"
    )
    rows = []
    for name, open_loaded in stores:
        with open_loaded() as store:
            rows += measure(name, store, args.repeats)
    print_table(["store", "turns", "query", "total", "paged ms", "full scan ms", "speedup"], rows)


if __name__ == "__main__":
    main()
