"""The server's handle on the store: opened on first use, read-only, and unavailable (503)
rather than fatal while the database is down.

Every connection is made read-only (SQLite ``PRAGMA query_only``, PostgreSQL
``default_transaction_read_only``), so nothing the server runs can change the logs. The store
is migrated once, when it is first opened (as every sparring command does), which also builds
the search index (migrations 0003 and 0006).
"""

from __future__ import annotations

import threading

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from storage.engine import DatabaseError, driver_message, open_store
from storage.listeners import make_read_only
from storage.redact import redact


class StoreUnavailable(RuntimeError):
    """The database cannot be reached or read now; the message says why."""


class Store:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    def engine(self) -> Engine:
        """The open engine; opens (and migrates) the store on first use, and again after a
        failed attempt. StoreUnavailable when it cannot."""
        with self._lock:
            if self._engine is None:
                try:
                    engine = open_store(self.database_url)
                except DatabaseError as exc:
                    raise StoreUnavailable(redact(str(exc))) from exc
                engine.dispose()  # the connections made while migrating were writable
                make_read_only(engine)
                self._engine = engine
            return self._engine

    def dispose(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None


def unavailable(exc: DBAPIError) -> StoreUnavailable:
    """A database error met while reading, as the reason the store is unavailable."""
    return StoreUnavailable(redact(f"the database is unavailable: {driver_message(exc)}"))
