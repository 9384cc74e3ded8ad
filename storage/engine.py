"""Opening the store: URL checks, SQLite settings, connection check and migration.

Every failure comes out as a ``DatabaseError`` whose message says what is wrong and how to
fix it, so that the CLI can print it as is.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from alembic.util import CommandError
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    NoSuchModuleError,
    OperationalError,
    SQLAlchemyError,
    StatementError,
)
from sqlalchemy.orm import Session

from storage.migrate import upgrade_to_head

URL_SETTING = "SPARRING_DATABASE_URL"
URL_HELP = "Use sqlite:///path/to/file.db or postgresql+psycopg://user@host:5432/dbname"
SQLITE_PRAGMAS = ("busy_timeout=30000", "journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON")
"""Applied to every SQLite connection; busy_timeout first so that switching to WAL waits too."""
POSTGRES_CONNECT_TIMEOUT_S = 10
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
RETRY_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.5, 2.5)
"""Backoff between attempts of a transaction that hit a transient error (about 5.5 s in all),
each scaled by a random 0.5-1.5 so that processes locked out together do not retry together."""
SQLITE_BUSY, SQLITE_LOCKED = 5, 6
"""SQLite's primary result codes of the errors another connection's lock causes."""
POSTGRES_POOL = {"pool_size": 5, "max_overflow": 10}
"""SQLAlchemy's default pool, for a process that serves many threads."""
POSTGRES_WORK_MEM_KB = 64 * 1024
"""The least ``work_mem`` a PostgreSQL connection gets (the server's default is 4 MB; a higher
setting of the server or the user is kept). Full-text search reads its matches through a
bitmap of heap pages, which turns lossy past work_mem: PostgreSQL then rechecks every row on
those pages (with 0003's expression index it recomputed each tsvector: at 1M turns, a word in
170k of them took 12 s instead of 0.9 s)."""
WORKER_POSTGRES_POOL = {"pool_size": 2, "max_overflow": 2}
"""For one of many `sparring play --workers` processes: its recorder's writer and one reader
need two connections, so N workers on M machines hold about 2*N*M of the server's
``max_connections`` (100 by default)."""

T = TypeVar("T")


class DatabaseError(RuntimeError):
    """The store cannot be opened or written; the message says how to fix it."""


def open_store(url: str, *, migrate: bool = True, pool: dict[str, int] | None = None) -> Engine:
    """An Engine on the store at ``url``, checked and (by default) migrated to the newest schema.

    ``postgresql://`` and ``postgres://`` mean the psycopg 3 driver. ``pool``: PostgreSQL
    connection pool sizes (default ``POSTGRES_POOL``; SQLite ignores them).
    """
    parsed = _parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        _prepare_sqlite_file(parsed)
    engine = _create_engine(parsed, pool or POSTGRES_POOL)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except SQLAlchemyError as exc:
        engine.dispose()
        raise _connection_error(parsed, exc) from exc
    if migrate:
        try:
            upgrade_to_head(engine)
        except (CommandError, SQLAlchemyError) as exc:
            engine.dispose()
            raise _migration_error(parsed, exc) from exc
    return engine


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """An ORM session committed when the block ends and rolled back if it raises."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


def in_transaction(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction, and again after transient errors (SQLite's "database
    is locked", a lost connection) with backoff; other errors are raised at once."""
    delays = iter(RETRY_DELAYS_S)
    while True:
        try:
            with engine.begin() as conn:
                return work(conn)
        except DBAPIError as exc:
            delay = next(delays, None)
            if delay is None or not _transient(exc):
                raise
        time.sleep(delay * random.uniform(0.5, 1.5))


def _transient(exc: DBAPIError) -> bool:
    """Whether trying again may work: a lost connection, a PostgreSQL operational error (the
    server restarting, a network fault), or SQLite busy or locked. SQLite reports every other
    failure to run a statement as an OperationalError too (a missing table, a read-only or full
    file, I/O errors): those would fail the same way for the whole backoff, so they are not."""
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError):
        return False
    code = getattr(exc.orig, "sqlite_errorcode", None)  # sqlite3's errors only
    return code is None or (code & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED)  # extended codes keep these bits


def _parse_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(f"{URL_SETTING}={url!r} is not a database URL. {URL_HELP}") from exc
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise DatabaseError(
            f"{URL_SETTING}={url!r} is an in-memory SQLite database, which the recorder's writer "
            "thread cannot share. Use a file: sqlite:///path/to/file.db"
        )
    if backend == "postgresql" and not parsed.database:
        raise DatabaseError(f"{URL_SETTING}={url!r} names no database. {URL_HELP}")
    return parsed


def _prepare_sqlite_file(url: URL) -> None:
    folder = Path(url.database or "").parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(
            f"cannot create the folder {str(folder)!r} for the SQLite database ({exc.strerror or exc}). "
            f"Set {URL_SETTING} to a file in a writable folder, e.g. sqlite:///./sparring.db"
        ) from exc


def _create_engine(url: URL, pool: dict[str, int]) -> Engine:
    kwargs: dict[str, Any] = {}
    if url.get_backend_name() == "postgresql":
        kwargs.update(pool, pool_pre_ping=True)
        if "connect_timeout" not in url.query:
            kwargs["connect_args"] = {"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(url, **kwargs)
    except NoSuchModuleError as exc:
        raise DatabaseError(
            f"{URL_SETTING}={_shown(url)!r} names an unknown database kind {url.drivername!r}. {URL_HELP}"
        ) from exc
    except ImportError as exc:
        hint = "pip install 'sparring[postgres]'" if url.get_backend_name() == "postgresql" else "install it"
        raise DatabaseError(
            f"the Python driver for {url.drivername!r} is not installed ({exc}). Fix: {hint}"
        ) from exc
    if url.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _set_sqlite_pragmas)
    elif url.get_backend_name() == "postgresql":
        event.listen(engine, "connect", _raise_postgres_work_mem)
    return engine


def _set_sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(f"PRAGMA {pragma}")
    finally:
        cursor.close()


def _raise_postgres_work_mem(dbapi_connection: Any, _record: object) -> None:
    with dbapi_connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('work_mem', %s, false) FROM pg_settings "
            "WHERE name = 'work_mem' AND setting::bigint < %s",  # pg_settings gives work_mem in kB
            (f"{POSTGRES_WORK_MEM_KB}kB", POSTGRES_WORK_MEM_KB),
        )
    dbapi_connection.commit()


def _connection_error(url: URL, exc: SQLAlchemyError) -> DatabaseError:
    reason = driver_message(exc)
    if url.get_backend_name() == "sqlite":
        return DatabaseError(
            f"cannot open the SQLite database {url.database!r}: {reason}. Check that the file "
            f"and its folder are writable and that it is a SQLite database, or point {URL_SETTING} elsewhere."
        )
    port = url.port or DEFAULT_PORTS.get(url.get_backend_name())
    where = f"{url.host or 'localhost'}" + (f":{port}" if port else "")
    return DatabaseError(
        f"cannot use the {url.get_backend_name()} database {url.database!r} at {where}: {reason}. "
        f"Start the server (or create the database and grant access), or fix {URL_SETTING}={_shown(url)!r}."
    )


def _migration_error(url: URL, exc: Exception) -> DatabaseError:
    if isinstance(exc, CommandError):  # e.g. a revision this version of sparring does not know
        return DatabaseError(
            f"cannot migrate the store at {_shown(url)}: {exc}. If a newer version of sparring "
            "created it, upgrade sparring (pip install -U sparring) or use another database."
        )
    return DatabaseError(
        f"cannot migrate the store at {_shown(url)} to the current schema: {driver_message(exc)}. "
        "Check that the database user may create tables and indexes there."
    )


def driver_message(exc: BaseException) -> str:
    """The driver's error and the first line of its message (SQLAlchemy's own adds the SQL
    and its parameters)."""
    orig = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    first_line = next(iter(str(orig).strip().splitlines()), "")
    return f"{type(orig).__name__}: {first_line}"


def _shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)
