"""What every command shares: consoles, errors that exit, settings and the store."""

from __future__ import annotations

import os
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from app.api import store as api_store
from app.api.errors import InputError
from app.output import Format
from app.settings import Settings
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
"""--ray of the commands that play episodes (play, eval, retrain): ``app.ray_workers``."""


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


def settings_or_exit(**overrides: object) -> Settings:
    try:
        return api_store.settings(**overrides)
    except InputError as exc:
        fail(str(exc))


def store_or_exit(settings: Settings):
    try:
        return api_store.open_store(settings.database_url)
    except InputError as exc:
        fail(str(exc))


def engine_or_exit(db: str | None):
    """The store named by --db (or the settings), migrated; exits with a clear error."""
    return store_or_exit(settings_or_exit(database_url=db))


def require_writable(engine) -> None:
    """Exit with one clear line when the command, which logs or registers work, cannot write the store."""
    try:
        api_store.require_writable(engine)
    except InputError as exc:
        fail(str(exc))


def clean_up_stale_work(engine) -> None:
    """``api.clean_up_stale_work``, saying what it marked; exits when the store cannot be written."""
    try:
        stale = api_store.clean_up_stale_work(engine)
    except InputError as exc:
        fail(str(exc))
    if stale.line() is not None:
        err.print(stale.line())