"""Schema objects that exist only in migrations, never in ``storage.models``.

Migration 0003's full-text search index cannot be declared as SQLAlchemy models: on SQLite it
is an FTS5 virtual table (with the shadow tables FTS5 creates for it) kept by triggers, on
PostgreSQL a GIN index on an expression that calls a SQL function. Comparing the store with the
models (Alembic's autogenerate, the schema test) would otherwise report them as objects to
drop. ``include_object`` leaves out exactly these names and nothing else, so any other
difference between the migrations and the models still shows.
"""

from __future__ import annotations

from typing import Any

FTS5_SHADOWS = ("data", "idx", "content", "docsize", "config")
MIGRATION_ONLY_TABLES = frozenset({"turn_search", *(f"turn_search_{shadow}" for shadow in FTS5_SHADOWS)})
"""SQLite: the FTS5 table ``turn_search`` and its shadow tables (migration 0003)."""
MIGRATION_ONLY_INDEXES = frozenset({"ix_turn_payloads_search"})
"""PostgreSQL: the GIN ``tsvector`` index on ``turn_payloads`` (migration 0003)."""


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic's ``include_object`` hook: False for the migration-only objects found in the store."""
    if not reflected or compare_to is not None:
        return True
    if type_ == "table":
        return name not in MIGRATION_ONLY_TABLES
    if type_ == "index":
        return name not in MIGRATION_ONLY_INDEXES
    return True
