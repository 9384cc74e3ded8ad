"""Read-only connections: an engine whose every new connection refuses to write (SQLite
``PRAGMA query_only``, PostgreSQL ``default_transaction_read_only``), for a reader such as the
viewer that must never change the logs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event


def make_read_only(engine: Engine) -> None:
    """Make every connection ``engine`` opens from now on read-only. Connections already in its
    pool are not: dispose of the engine first when it has written (migrations)."""
    event.listen(engine, "connect", _READ_ONLY[engine.dialect.name])


def _sqlite_read_only(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA query_only = ON")
    finally:
        cursor.close()


def _postgres_read_only(dbapi_connection: Any, _record: object) -> None:
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    dbapi_connection.commit()


_READ_ONLY = {"sqlite": _sqlite_read_only, "postgresql": _postgres_read_only}
