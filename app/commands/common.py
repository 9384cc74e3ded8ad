"""What every command shares: consoles, errors that exit, settings and the store."""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from app.output import Format
from app.settings import Settings, SettingsError, load_settings
from storage.redact import redact

err = Console(stderr=True)
out = Console()

DbOption = Annotated[
    str | None, typer.Option("--db", help="Database URL; overrides SPARRING_DATABASE_URL.", show_default=False)
]
FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` (keys and passwords masked: storage.redact) and exit with ``code``."""
    err.print(f"[bold red]error:[/] {escape(redact(message))}", highlight=False)
    raise typer.Exit(code)


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


def clean_up_stale_work(engine) -> None:
    """Mark failed what processes of this host that are gone (killed, crashed) left running:
    episodes and their runs, training jobs (whose temporary folders are removed). Every command
    that starts work calls it first, so leftovers do not wait for some later `play`."""
    from storage.orphans import mark_orphans
    from training.jobs import fail_stale_jobs

    episodes, jobs = mark_orphans(engine), fail_stale_jobs(engine)
    if episodes or jobs:
        err.print(f"marked as failed what stopped processes left running: {episodes} episode(s), "
                  f"{jobs} training job(s)")
