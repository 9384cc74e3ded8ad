"""Opening the store: URL checks, SQLite settings, connection check and migration.

Every failure comes out as a ``DatabaseError`` whose message says what is wrong and how to
fix it, so that the CLI can print it as is.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

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
from storage.redact import redact

URL_SETTING = "SPARRING_DATABASE_URL"
URL_HELP = "Use sqlite:///path/to/file.db or postgresql+psycopg://user@host:5432/dbname"
POSTGRES_INSTALL = ".venv/bin/pip install 'psycopg[binary]'"
"""how to install the PostgreSQL driver into sparring's environment"""
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
    connection pool sizes (default ``POSTGRES_POOL``; SQLite ignores them). A SQLite file this
    process cannot write (nor the folder where SQLite keeps its -wal and -shm files) is opened
    read-only, so reading never needs write access; writing to it then fails, and commands that
    write say so first (``app.api.store.require_writable``). Nothing is created for a URL
    that is wrong: a SQLite file's folder must exist.
    """
    parsed = _parse_url(url)
    read_only = parsed.get_backend_name() == "sqlite" and _check_sqlite_file(parsed)
    engine = _create_engine(parsed, pool or POSTGRES_POOL, read_only=read_only)
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
            if read_only:
                raise DatabaseError(
                    f"the SQLite store {parsed.database!r} has an older schema than this sparring reads, and "
                    f"migrating it needs write access: make it writable once (chmod u+w {parsed.database}) and run "
                    "any sparring command on it"
                ) from exc
            raise _migration_error(parsed, exc) from exc
    return engine


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """An ORM session committed when the block ends and rolled back if it raises."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


def ping(engine: Engine) -> None:
    """Ask the database a trivial question; raises its error (DBAPIError) when it does not answer."""
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")


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
    """The checked URL; DatabaseError (its password masked) when it cannot name a store."""
    shown = redact(url)
    try:
        parsed = make_url(url)
        port = parsed.port
    except ArgumentError as exc:
        raise DatabaseError(f"{URL_SETTING}={shown!r} is not a database URL. {URL_HELP}") from exc
    except ValueError:  # SQLAlchemy reads the port lazily
        raise DatabaseError(f"{URL_SETTING}={shown!r}: the port is not a number. {URL_HELP}") from None
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend == "sqlite" and (parsed.host or port):
        path = "/".join(part for part in (parsed.host, parsed.database) if part)
        raise DatabaseError(
            f"{URL_SETTING}={shown!r} has two slashes after 'sqlite:', which would make {parsed.host!r} a host; "
            f"a SQLite file takes three: sqlite:///{path} (relative to the current folder) or four for an "
            f"absolute path: sqlite:////{path}"
        )
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise DatabaseError(
            f"{URL_SETTING}={shown!r} is an in-memory SQLite database, which the recorder's writer "
            "thread cannot share. Use a file: sqlite:///path/to/file.db"
        )
    if backend == "postgresql" and not parsed.database:
        raise DatabaseError(f"{URL_SETTING}={shown!r} names no database. {URL_HELP}")
    return parsed


def _check_sqlite_file(url: URL) -> bool:
    """Whether the SQLite file must be opened read-only (it exists, and this process cannot
    write it or its folder); DatabaseError when its folder does not exist (nothing is created)."""
    path = Path(url.database or "")
    if url.database and url.database.startswith("file:"):
        return False
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise DatabaseError(f"{str(folder)!r} is a file, so it cannot hold the SQLite database {str(path)!r}: set "
                            f"{URL_SETTING} to a file in a folder, e.g. sqlite:///./sparring.db")
    if not folder.is_dir():
        raise DatabaseError(
            f"the folder {str(folder)!r} of the SQLite database {str(path)!r} does not exist: create it "
            f"(mkdir -p {folder}) or set {URL_SETTING} to a file in an existing folder, e.g. sqlite:///./sparring.db"
        )
    if not path.exists():
        return False
    beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    writable = os.access(path, os.W_OK) and all(os.access(f, os.W_OK) for f in beside if f.exists())
    return not (writable and (all(f.exists() for f in beside) or os.access(folder, os.W_OK)))


def _read_only_connection(path: str) -> Callable[[], sqlite3.Connection]:
    """Connections to a SQLite file this process cannot write: read-only, and immutable (a
    snapshot: SQLite needs to write its -shm file to follow another process's writes) unless
    that file is already there."""
    shm = Path(path + "-shm")
    flags = "mode=ro" if shm.exists() and os.access(shm, os.R_OK) else "mode=ro&immutable=1"
    uri = f"file:{quote(Path(path).resolve().as_posix())}?{flags}"
    return lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)


def _create_engine(url: URL, pool: dict[str, int], *, read_only: bool = False) -> Engine:
    kwargs: dict[str, Any] = {}
    if read_only:
        kwargs["creator"] = _read_only_connection(url.database or "")
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
        if url.get_backend_name() != "postgresql":
            hint = f"install the Python package {url.get_driver_name()!r}"
        elif url.get_driver_name() == "psycopg":
            hint = f"{POSTGRES_INSTALL} (scripts/setup installs it)"
        else:
            hint = (f"install the Python package {url.get_driver_name()!r}, or use the driver sparring installs: "
                    f"postgresql+psycopg://... ({POSTGRES_INSTALL})")
        raise DatabaseError(
            f"the Python driver for {url.drivername!r} is not installed ({exc}). Fix: {hint}"
        ) from exc
    if url.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _set_read_only_pragmas if read_only else _set_sqlite_pragmas)
    elif url.get_backend_name() == "postgresql":
        event.listen(engine, "connect", _raise_postgres_work_mem)
    return engine


def _set_sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    """Switching to WAL needs the file's exclusive lock, and SQLite answers "database is locked" at
    once, without waiting out busy_timeout, while another connection holds a write lock on a file
    still in rollback mode (another process creating the store): so each pragma is retried with
    the backoff of transactions."""
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            _execute_when_unlocked(cursor, f"PRAGMA {pragma}")
    finally:
        cursor.close()


def _execute_when_unlocked(cursor: Any, sql: str) -> None:
    delays = iter(RETRY_DELAYS_S)
    while True:
        try:
            cursor.execute(sql)
            return
        except sqlite3.OperationalError as exc:
            delay = next(delays, None)
            code = getattr(exc, "sqlite_errorcode", SQLITE_BUSY)
            if delay is None or (code & 0xFF) not in (SQLITE_BUSY, SQLITE_LOCKED):
                raise
        time.sleep(delay * random.uniform(0.5, 1.5))


def _set_read_only_pragmas(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in ("busy_timeout=30000", "query_only=ON"):
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
    return redact(f"{type(orig).__name__}: {first_line}")


def _shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def store_key(url: str) -> str:
    """A folder name that is this store's alone: its database's name and a digest of where it
    lives (a SQLite file's absolute path; a server's backend, host, port and database, never its
    user or password). Two stores that share a data directory keep their dataset snapshots and
    adapter versions apart under it (``Settings.store_dir``), so that each store's ``actor@v1``
    is its own. Raises DatabaseError for a URL that names no store."""
    parsed = _parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        where = os.path.abspath(os.path.expanduser(parsed.database))
        name = Path(where).stem
    else:
        where = f"{parsed.get_backend_name()}://{parsed.host or ''}:{parsed.port or ''}/{parsed.database}"
        name = parsed.database
    digest = hashlib.sha256(where.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)[:40]}-{digest}"
