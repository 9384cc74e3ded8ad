"""Building DPO and PPO datasets from a store of 1M logged turns, against one plain SELECT.

The store holds N synthetic turns (bench/synthetic_store.py); SQLite is cached per size,
PostgreSQL is loaded into a fresh database and dropped afterwards.

* build: ``training.datasets.build_snapshot`` for the math-reflection ``actor``, everything
  since the beginning: read the succeeded episodes, credit the turns, make the rows (DPO:
  refinement and group pairs; PPO: token ids, behaviour logprobs, group-normalised
  advantages), write the JSONL file and register the snapshot;
* plain SELECT: one query of the columns those rows are made of (the actor's turns of the
  succeeded math-reflection episodes, their payload columns, decoded, and their rewards),
  every row fetched, nothing else done.

Prints seconds of each and build / SELECT (best of --repeats, alternated, after a warm-up
SELECT so that both read from a warm cache). The snapshots the builds register are removed
afterwards, leaving a cached store as it was.

    python -m bench.dataset_build                      # 1,000,000 turns
    python -m bench.dataset_build --turns 50000 --repeats 1
    python -m bench.dataset_build --kinds dpo        # DPO only
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine

from bench.common import add_postgres_argument, note, print_table
from bench.synthetic_store import LoadedStore, bench_stores
from storage.bench_rows import count_turn_rows, delete_snapshots
from storage.engine import open_store
from storage.models import DatasetKind
from training.datasets import build_snapshot

GAME, ROLE = "math-reflection", "actor"
KINDS = (DatasetKind.DPO, DatasetKind.PPO)


def plain_select(engine: Engine, kind: DatasetKind) -> int:
    """Fetch every row the build reads from, in one query; returns how many."""
    return count_turn_rows(engine, game=GAME, seat=ROLE, tokens=kind == DatasetKind.PPO)


def build(engine: Engine, kind: DatasetKind, out_dir: Path) -> int:
    """Build the snapshot; returns its row count."""
    result = build_snapshot(engine, kind, ROLE, game=GAME, base_model="bench", out_dir=out_dir, since=None)
    return result.row_count


def timed(work: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    count = work()
    return time.perf_counter() - started, count


def measure(name: str, store: LoadedStore, repeats: int, kinds: list[DatasetKind]) -> list[tuple[object, ...]]:
    engine = open_store(store.url)
    table = []
    try:
        with tempfile.TemporaryDirectory(prefix="sparring-dataset-bench-") as out:
            for kind in kinds:
                note(f"{name}: {kind} (warm-up SELECT)")
                plain_select(engine, kind)
                select_s = build_s = float("inf")
                for attempt in range(repeats):
                    seconds, selected = timed(lambda: plain_select(engine, kind))
                    select_s = min(select_s, seconds)
                    seconds, rows = timed(lambda: build(engine, kind, Path(out)))
                    build_s = min(build_s, seconds)
                    note(f"  #{attempt + 1}: SELECT {select_s:.1f} s, build {build_s:.1f} s")
                ratio = f"{build_s / select_s:.2f}x"
                table.append((name, store.turns, str(kind), selected, rows, select_s, build_s, ratio))
        delete_snapshots(engine, "bench")
    finally:
        engine.dispose()
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1_000_000, help="turns in the store (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs of each (default 2)")
    parser.add_argument("--kinds", default="dpo,ppo", help="comma-separated dataset kinds (default dpo,ppo)")
    add_postgres_argument(parser)
    args = parser.parse_args()
    names = [name.strip() for name in args.kinds.split(",")]
    if not names or not set(names) <= {kind.value for kind in KINDS}:
        parser.error(f"--kinds: choose among {', '.join(kind.value for kind in KINDS)}; got {args.kinds!r}")
    kinds = [DatasetKind(name) for name in names]

    stores = bench_stores(args.turns, args.postgres_url)
    print(f"dataset builds for {GAME} {ROLE} vs one plain SELECT of the columns they need; best of {args.repeats}")
    rows = []
    for name, open_loaded in stores:
        with open_loaded() as store:
            rows += measure(name, store, args.repeats, kinds)
    print_table(["store", "turns", "kind", "rows selected", "rows built", "SELECT s", "build s", "build/SELECT"], rows)


if __name__ == "__main__":
    main()
