"""Full-text search over each turn's prompt messages and response (storage.search).

SQLite: an FTS5 table ``turn_search`` (the turn's id, and its text: the response and every
message's content), kept in step with ``turn_payloads`` by triggers and filled from what is
already logged. PostgreSQL: a GIN index on the ``tsvector`` of the same text, computed by an
immutable function, so nothing needs keeping in step. Both tokenise words without stemming
(FTS5 ``unicode61``, PostgreSQL ``simple``; there ``<``, ``>`` and ``&`` become spaces, or its
parser would skip what sits between ``<script>`` tags as markup). The text is cut at ``MAX_CHARS`` characters, so
that one huge turn can never fail an insert (PostgreSQL limits a tsvector to 1 MB).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAX_CHARS = 200_000
_SQLITE_TEXT = (
    "substr(coalesce({row}.response, '') || ' ' || coalesce(("
    "SELECT group_concat(json_extract(m.value, '$.content'), ' ') "
    "FROM json_each({row}.messages) AS m WHERE m.type = 'object'), ''), 1, %d)" % MAX_CHARS
)
_SQLITE = [
    "CREATE VIRTUAL TABLE turn_search USING fts5(turn_id UNINDEXED, body, tokenize = 'unicode61')",
    "INSERT INTO turn_search (turn_id, body) "
    "SELECT p.turn_id, " + _SQLITE_TEXT.format(row="p") + " FROM turn_payloads AS p",
    "CREATE TRIGGER turn_search_insert AFTER INSERT ON turn_payloads BEGIN "
    "INSERT INTO turn_search (turn_id, body) VALUES (new.turn_id, " + _SQLITE_TEXT.format(row="new") + "); END",
    # sparring never deletes or rewrites a payload; these keep the index true when someone does
    "CREATE TRIGGER turn_search_delete AFTER DELETE ON turn_payloads BEGIN "
    "DELETE FROM turn_search WHERE turn_id = old.turn_id; END",
    "CREATE TRIGGER turn_search_update AFTER UPDATE OF turn_id, response, messages ON turn_payloads BEGIN "
    "DELETE FROM turn_search WHERE turn_id = old.turn_id; "
    "INSERT INTO turn_search (turn_id, body) VALUES (new.turn_id, " + _SQLITE_TEXT.format(row="new") + "); END",
]
_SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS turn_search_update",
    "DROP TRIGGER IF EXISTS turn_search_delete",
    "DROP TRIGGER IF EXISTS turn_search_insert",
    "DROP TABLE IF EXISTS turn_search",
]
_POSTGRES = [
    "CREATE FUNCTION sparring_turn_text(response text, messages json) RETURNS text "
    "LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT translate(left(coalesce(response, '') || ' ' || coalesce("
    "(SELECT string_agg(m ->> 'content', ' ') FROM json_array_elements("
    "CASE WHEN json_typeof(messages) = 'array' THEN messages ELSE '[]'::json END) AS m "
    "WHERE json_typeof(m) = 'object'), ''), %d), '<>&', '   ') $$" % MAX_CHARS,
    "CREATE INDEX ix_turn_payloads_search ON turn_payloads "
    "USING gin (to_tsvector('simple'::regconfig, sparring_turn_text(response, messages)))",
]
_POSTGRES_DOWN = [
    "DROP INDEX IF EXISTS ix_turn_payloads_search",
    "DROP FUNCTION IF EXISTS sparring_turn_text(text, json)",
]


def _run(statements: dict[str, list[str]]) -> None:
    dialect = op.get_bind().dialect.name
    for statement in statements.get(dialect, []):
        op.execute(statement)


def upgrade() -> None:
    _run({"sqlite": _SQLITE, "postgresql": _POSTGRES})


def downgrade() -> None:
    _run({"sqlite": _SQLITE_DOWN, "postgresql": _POSTGRES_DOWN})
