"""What the store benchmarks share: the PostgreSQL option, throwaway databases, progress
output (on stderr) and the printed tables (on stdout)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from storage.engine import DatabaseError, open_store
from storage.scratch import scratch_postgres_database

POSTGRES_ENV = "SPARRING_BENCH_POSTGRES_URL"
_stderr = Console(stderr=True, soft_wrap=True)


def add_postgres_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(POSTGRES_ENV),
        help=f"a PostgreSQL server where the user may create databases (default: ${POSTGRES_ENV}); "
        "the benchmark creates its own database there and drops it afterwards. Without it PostgreSQL is skipped.",
    )


def postgres_server(url: str | None) -> str | None:
    """The server URL if it can be used; otherwise None, after printing why it is skipped."""
    if not url:
        print(f"PostgreSQL: skipped (set {POSTGRES_ENV} or pass --postgres-url)")
        return None
    try:
        open_store(url, migrate=False).dispose()
    except DatabaseError as exc:
        print(f"PostgreSQL: skipped ({exc})")
        return None
    return url


def fresh_postgres_database(server_url: str) -> AbstractContextManager[str]:
    """An empty benchmark database on the server, dropped afterwards."""
    return scratch_postgres_database(server_url, prefix="sparring_bench")


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr; the yielded function advances it."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_stderr,
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def note(message: str) -> None:
    """A progress message (stderr), kept apart from the results (stdout)."""
    _stderr.print(message, highlight=False)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Right-aligned columns, floats with 2 decimals (3 significant digits below 1)."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)), flush=True)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1 else f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
