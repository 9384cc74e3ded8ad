"""What every command shares: consoles, errors that exit, settings and the store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from app.output import Format
from app.settings import Settings, SettingsError, load_settings
from app.terminal import printable
from storage.redact import redact

err = Console(stderr=True)
out = Console()

DbOption = Annotated[
    str | None, typer.Option("--db", help="Database URL; overrides SPARRING_DATABASE_URL.", show_default=False)
]
FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
RayOption = Annotated[str | None, typer.Option(
    "--ray", metavar="ADDRESS", show_default=False,
    help="Play the episodes on the Ray cluster at ADDRESS, each worker with its own models, into a PostgreSQL "
    "store: HOST:6379 (the head's address), ray://HOST:10001 or auto (the cluster this machine joined); e.g. "
    "--ray 10.0.0.5:6379. Default: SPARRING_RAY_ADDRESS, else this machine plays (docs/scaling.md).")]
"""--ray of the commands that play episodes (play, eval): ``app.ray_workers``."""


def ray_cluster_or_exit(settings: Settings, address: str | None):
    """The Ray cluster of --ray (or SPARRING_RAY_ADDRESS), checked; None when neither is given."""
    address = address or settings.ray_address
    if address is None:
        return None
    from app.ray_workers import RaySetupError, connect

    try:
        return connect(settings, address)
    except RaySetupError as exc:
        fail(str(exc))


ConcurrencyOption = Annotated[int, typer.Option(
    "--concurrency", "-c", min=1, help="Episodes played at once (all of them wait on the model together: "
    "SPARRING_MAX_BATCH_SIZE of their requests are decoded in one batch).")]
"""--concurrency of the commands that evaluate (eval, deploy, retrain), default 256: an evaluation's
episodes are decoded in as few batches as SPARRING_MAX_BATCH_SIZE allows (docs/results/2026-11-27-benchmarks.md)."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` (keys and passwords masked: storage.redact; control characters
    escaped: app.terminal) and exit with ``code``."""
    err.print(f"[bold red]error:[/] {escape(printable(redact(message)))}", highlight=False)
    raise typer.Exit(code)


def api_token_for(host: str) -> str | None:
    """The API token (``SPARRING_API_TOKEN``) a server bound to ``host`` requires, or None on a
    loopback bind without one; exits with the fix when another bind has none."""
    from app.server.security import TOKEN_SETTING, BindError, check_bind

    token = os.environ.get(TOKEN_SETTING) or None
    try:
        check_bind(host, token)
    except BindError as exc:
        fail(str(exc))
    return token


def one_line(exc: BaseException, limit: int = 600) -> str:
    """An error's message on one line and at most ``limit`` characters: a library's own (a
    tensor size mismatch, a server's reply) can run to thousands of lines. Keys and passwords are masked."""
    text = redact(" ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def settings_or_exit(**overrides: object) -> Settings:
    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        fail(str(exc))


def store_or_exit(settings: Settings):
    from storage.engine import DatabaseError, open_store

    try:
        return open_store(settings.database_url)
    except DatabaseError as exc:
        fail(str(exc))


def engine_or_exit(db: str | None):
    """The store named by --db (or the settings), migrated; exits with a clear error."""
    return store_or_exit(settings_or_exit(database_url=db))


def read_only_store(engine) -> str | None:
    """Why sparring cannot write to the SQLite file of ``engine`` (one line: the file, that it
    is read-only, how to fix it); None when it can, or for other databases. SQLite writes the
    file and, beside it, its ``-wal`` and ``-shm`` files (WAL mode), so both need write access."""
    if engine.dialect.name != "sqlite" or not engine.url.database or engine.url.database.startswith("file:"):
        return None
    path = Path(engine.url.database).resolve()
    how = "log elsewhere with --db sqlite:///other.db"
    if path.exists() and not os.access(path, os.W_OK):
        return f"the SQLite store {path} is read-only: make it writable (chmod u+w {path}) or {how}"
    beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    for file in beside:
        if file.exists() and not os.access(file, os.W_OK):
            return f"the SQLite store's {file} is read-only: make it writable (chmod u+w {file}) or {how}"
    if not all(file.exists() for file in beside) and not os.access(path.parent, os.W_OK):
        return (f"the folder of the SQLite store {path} is read-only (SQLite writes its -wal and -shm files "
                f"there): make it writable (chmod u+w {path.parent}) or {how}")
    return None


def require_writable(engine) -> None:
    """Exit with one clear line when the command, which logs or registers work, cannot write the store."""
    problem = read_only_store(engine)
    if problem is not None:
        fail(problem)


def clean_up_stale_work(engine) -> None:
    """Mark failed what processes of this host that are gone (killed, crashed) left running:
    episodes and their runs, training jobs (whose temporary folders are removed). Every command
    that starts work calls it first, so leftovers do not wait for some later `play`; a store it
    cannot write is one clear error here."""
    from storage.orphans import mark_orphans
    from training.jobs import fail_stale_jobs

    require_writable(engine)
    episodes, jobs = mark_orphans(engine), fail_stale_jobs(engine)
    if episodes or jobs:
        err.print(f"marked as failed what stopped processes left running: {episodes} episode(s), "
                  f"{jobs} training job(s)")
