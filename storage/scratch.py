"""A throwaway PostgreSQL database, for tests and benchmarks that need an empty store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import make_url

from storage.engine import open_store


@contextmanager
def scratch_postgres_database(server_url: str, *, prefix: str = "sparring_scratch") -> Iterator[str]:
    """Create an empty database on the server of ``server_url`` (whose user may create
    databases); yield its URL; drop it, even with connections still open."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    server = open_store(server_url, migrate=False)
    admin = server.execution_options(isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        server.dispose()
