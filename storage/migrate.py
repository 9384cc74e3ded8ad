"""Alembic, driven from code: no alembic.ini is needed anywhere.

``upgrade_to_head`` is safe when several processes open the same store at once: the upgrade
runs in one transaction that first takes a lock (a PostgreSQL advisory lock, or SQLite's
write lock through ``BEGIN IMMEDIATE``), so the later processes wait, then find the schema
already at head.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
ADVISORY_LOCK_KEY = 0x5350415252  # "SPARR": any constant shared by every sparring process


def alembic_config(*, url: str | None = None, connection: Connection | None = None) -> Config:
    """An Alembic Config for the store at ``url``, or for an open ``connection``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine) -> None:
    """Migrate the store to the newest schema; a no-op (one read) when it is already there."""
    head = head_revision()
    with engine.connect() as conn:
        if current_revision(conn) == head:
            return
    with engine.connect() as conn, conn.begin():
        _lock_for_migration(conn)
        command.upgrade(alembic_config(connection=conn), "head")


def _lock_for_migration(conn: Connection) -> None:
    """Held until the surrounding transaction ends."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
    elif conn.dialect.name == "sqlite":
        # pysqlite opens no transaction for DDL by itself; this one also makes the DDL atomic.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
