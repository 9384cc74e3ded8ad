"""Schema objects that exist only in migrations, never in ``storage.models``.

The full-text search index (migrations 0003 and 0006) is not declared as SQLAlchemy models: on
SQLite it is a contentless FTS5 virtual table (with the shadow tables FTS5 creates for it) and a
table of the turns and episodes it holds, on PostgreSQL a table of tsvectors with a GIN index;
triggers keep both in step. Comparing the store with the models (Alembic's autogenerate, the
schema test) would otherwise report them as objects to drop. ``include_object`` leaves out
exactly these names and nothing else, so any other difference between the migrations and the
models still shows.
"""

from __future__ import annotations

from typing import Any

FTS5_SHADOWS = ("data", "idx", "docsize", "config")
"""The shadow tables of a contentless FTS5 table (one with content has ``content`` too)."""
MIGRATION_ONLY_TABLES = frozenset({"turn_search", "turn_search_turns",
                                   *(f"turn_search_{shadow}" for shadow in FTS5_SHADOWS)})
"""``turn_search``: on SQLite the FTS5 table, its shadow tables and ``turn_search_turns``, on
PostgreSQL a plain table (migration 0006)."""
MIGRATION_ONLY_INDEXES = frozenset({"ix_turn_search_document", "ix_turn_search_episode_id"})
"""PostgreSQL: the indexes of ``turn_search`` (migration 0006)."""


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic's ``include_object`` hook: False for the migration-only objects found in the store."""
    if not reflected or compare_to is not None:
        return True
    if type_ == "table":
        return name not in MIGRATION_ONLY_TABLES
    if type_ == "index":
        return name not in MIGRATION_ONLY_INDEXES
    return True
