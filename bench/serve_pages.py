"""`sparring serve` on a store of 1M logged turns: the API's first page and the episodes page,
against the same query run directly (storage.queries.list_episodes).

The store holds N synthetic turns (bench/synthetic_store.py); SQLite is cached per size,
PostgreSQL is loaded into a fresh database and dropped afterwards. Each request goes through
the whole application in process (FastAPI's TestClient: routing, parameter checks, the query,
JSON or the Jinja2 page), without a network hop. Both count the matches as the server does,
up to app.server.filters.COUNT_LIMIT ("more than" past it); "read by" says how a search's
page was read (storage.search_page: matches, probe, or probe, then matches). Each figure is
the median of --repeats runs after one warm-up; the ratio is server time over direct time
(1.0x: the server adds nothing).

    python -m bench.serve_pages                        # 1,000,000 turns
    python -m bench.serve_pages --turns 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from app.server.app import create_app
from app.server.filters import COUNT_LIMIT
from bench.common import add_postgres_argument, note, print_table
from bench.synthetic_store import LoadedStore, bench_stores
from storage.engine import open_store
from storage.queries import EpisodeFilter, list_episodes

LIMIT = 50
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("first page", "", {}),
    ("succeeded math-reflection", "game=math-reflection&status=succeeded", {"game": "math-reflection",
                                                                            "status": "succeeded"}),
    ("search, rare words", "q=numbers+do+not+add+up", {"text": "numbers do not add up"}),
    ("search, common word", "q=arithmetic", {"text": "arithmetic"}),
    ("search, a rare word", "q=9876", {"text": "9876"}),
    ("search, common word of another game", "game=debate&q=arithmetic", {"game": "debate", "text": "arithmetic"}),
    ("search, commonest word of another game", "game=debate&q=verdict", {"game": "debate", "text": "verdict"}),
    ("search, common word of another seat", "seat=debater_b&q=reviewer", {"seat": "debater_b", "text": "reviewer"}),
]  # fmt: skip
"""label, the query string, the same filter as EpisodeFilter fields. A word of another game or
seat is in 100,000s of turns but in none of the episodes the filter selects: as with a word
that only old episodes hold, the first episodes in the page's order hold none of its matches
(storage.search_page), and here no episode does (the synthetic logs have no word of old
episodes only)."""


def median_s(work: Callable[[], object], repeats: int) -> float:
    work()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(name: str, store: LoadedStore, repeats: int) -> list[tuple[object, ...]]:
    engine = open_store(store.url)
    rows: list[tuple[object, ...]] = []
    try:
        with TestClient(create_app(store.url)) as client:
            for label, query, fields in CASES:
                flt = EpisodeFilter(**fields)
                direct = list_episodes(engine, flt, limit=LIMIT, count_limit=COUNT_LIMIT)
                api = client.get(f"/api/episodes?limit={LIMIT}&{query}")
                page = client.get(f"/?limit={LIMIT}&{query}")
                if api.status_code != 200 or page.status_code != 200:
                    raise SystemExit(f"{name} {label}: the server answered {api.status_code}/{page.status_code}")
                if [i["id"] for i in api.json()["items"]] != [i["id"] for i in direct.items]:
                    raise SystemExit(f"{name} {label}: the API's page differs from list_episodes'")
                matching = f"{direct.total:,}" if direct.total is not None else f"> {direct.more_than:,}"
                note(f"{name}: {label} ({matching} matching)")
                direct_s = median_s(lambda flt=flt: list_episodes(engine, flt, limit=LIMIT, count_limit=COUNT_LIMIT),
                                    repeats)
                for what, path in (("API", f"/api/episodes?limit={LIMIT}&{query}"),
                                   ("page", f"/?limit={LIMIT}&{query}")):
                    served_s = median_s(lambda path=path: client.get(path), repeats)
                    rows.append((name, store.turns, label, matching, direct.read_by or "", what, 1000 * served_s,
                                 1000 * direct_s, f"{served_s / direct_s:.2f}x"))
    finally:
        engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1_000_000, help="turns in the store (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=5, help="median of this many runs (default 5)")
    add_postgres_argument(parser)
    args = parser.parse_args()

    print(f"sparring serve, {LIMIT} episodes a page (newest first, counted up to {COUNT_LIMIT:,}) vs "
          f"list_episodes directly; median of {args.repeats}")
    for name, open_loaded in bench_stores(args.turns, args.postgres_url):
        with open_loaded() as store:  # each store's table as soon as it is measured: at 1M a load takes long
            rows = measure(name, store, args.repeats)
        print_table(["store", "turns", "query", "matching", "read by", "served", "served ms", "direct ms", "ratio"],
                    rows)


if __name__ == "__main__":
    main()
