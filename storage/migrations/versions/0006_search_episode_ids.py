"""The search index names each turn's episode and is indexed by it (storage.search), so a
search reads its episodes without looking each matching turn up in ``turns``, and a page of
common words can check the episodes it shows one by one instead of reading every match.

SQLite: the FTS5 table ``turn_search`` of migration 0003 becomes contentless (its words only:
it kept a second copy of every turn's text) and its rowids are those of ``turn_search_turns``
(turn, episode; indexed by both). PostgreSQL: migration 0003's GIN index on ``turn_payloads``
becomes a table ``turn_search`` (turn, episode, ``tsvector`` without positions) with a GIN
index and an index on the episode. On both, triggers on ``turn_payloads`` and ``turns`` keep
the index in step, and upgrading fills it from what is logged. The text and its words are
unchanged (``sparring_turn_text`` and the tokenisers of migration 0003).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAX_CHARS = 200_000  # as migration 0003
_SQLITE_TEXT = (
    "substr(coalesce({row}.response, '') || ' ' || coalesce(("
    "SELECT group_concat(json_extract(m.value, '$.content'), ' ') "
    "FROM json_each({row}.messages) AS m WHERE m.type = 'object'), ''), 1, %d)" % MAX_CHARS
)
_SQLITE_ADD = (  # the payload "new": its turn and episode, then its words under the same rowid
    "INSERT INTO turn_search_turns (turn_id, episode_id) SELECT new.turn_id, t.episode_id FROM turns AS t "
    "WHERE t.id = new.turn_id; "
    "INSERT INTO turn_search (rowid, body) SELECT s.id, " + _SQLITE_TEXT.format(row="new")
    + " FROM turn_search_turns AS s WHERE s.turn_id = new.turn_id;"
)
_SQLITE_REMOVE = (  # the payload "old": a contentless FTS5 table forgets words it is given back
    "INSERT INTO turn_search (turn_search, rowid, body) SELECT 'delete', s.id, " + _SQLITE_TEXT.format(row="old")
    + " FROM turn_search_turns AS s WHERE s.turn_id = old.turn_id; "
    "DELETE FROM turn_search_turns WHERE turn_id = old.turn_id;"
)
_SQLITE_0003_DROP = [
    "DROP TRIGGER turn_search_update",
    "DROP TRIGGER turn_search_delete",
    "DROP TRIGGER turn_search_insert",
    "DROP TABLE turn_search",
]
_SQLITE = [
    *_SQLITE_0003_DROP,
    "CREATE TABLE turn_search_turns (id INTEGER PRIMARY KEY, turn_id VARCHAR(32) NOT NULL UNIQUE, "
    "episode_id VARCHAR(32) NOT NULL)",
    "CREATE INDEX ix_turn_search_turns_episode_id ON turn_search_turns (episode_id)",
    "CREATE VIRTUAL TABLE turn_search USING fts5(body, content = '', tokenize = 'unicode61')",
    "INSERT INTO turn_search_turns (turn_id, episode_id) "
    "SELECT p.turn_id, t.episode_id FROM turn_payloads AS p JOIN turns AS t ON t.id = p.turn_id",
    "INSERT INTO turn_search (rowid, body) SELECT s.id, " + _SQLITE_TEXT.format(row="p")
    + " FROM turn_search_turns AS s JOIN turn_payloads AS p ON p.turn_id = s.turn_id",
    f"CREATE TRIGGER turn_search_insert AFTER INSERT ON turn_payloads BEGIN {_SQLITE_ADD} END",
    # sparring never deletes, rewrites or moves a turn; these keep the index true when someone does
    f"CREATE TRIGGER turn_search_delete AFTER DELETE ON turn_payloads BEGIN {_SQLITE_REMOVE} END",
    "CREATE TRIGGER turn_search_update AFTER UPDATE OF turn_id, response, messages ON turn_payloads "
    f"BEGIN {_SQLITE_REMOVE} {_SQLITE_ADD} END",
    "CREATE TRIGGER turn_search_episode AFTER UPDATE OF episode_id ON turns BEGIN "
    "UPDATE turn_search_turns SET episode_id = new.episode_id WHERE turn_id = new.id; END",
]
_SQLITE_0003_ADD = (
    "INSERT INTO turn_search (turn_id, body) VALUES (new.turn_id, " + _SQLITE_TEXT.format(row="new") + ")"
)
_SQLITE_DOWN = [  # back to migration 0003's table and triggers
    "DROP TRIGGER turn_search_episode",
    *_SQLITE_0003_DROP,
    "DROP TABLE turn_search_turns",
    "CREATE VIRTUAL TABLE turn_search USING fts5(turn_id UNINDEXED, body, tokenize = 'unicode61')",
    "INSERT INTO turn_search (turn_id, body) SELECT p.turn_id, " + _SQLITE_TEXT.format(row="p")
    + " FROM turn_payloads AS p",
    f"CREATE TRIGGER turn_search_insert AFTER INSERT ON turn_payloads BEGIN {_SQLITE_0003_ADD}; END",
    "CREATE TRIGGER turn_search_delete AFTER DELETE ON turn_payloads BEGIN "
    "DELETE FROM turn_search WHERE turn_id = old.turn_id; END",
    "CREATE TRIGGER turn_search_update AFTER UPDATE OF turn_id, response, messages ON turn_payloads BEGIN "
    f"DELETE FROM turn_search WHERE turn_id = old.turn_id; {_SQLITE_0003_ADD}; END",
]
_POSTGRES_DOCUMENT = "strip(to_tsvector('simple'::regconfig, sparring_turn_text({row}.response, {row}.messages)))"
_POSTGRES = [
    "DROP INDEX ix_turn_payloads_search",
    "CREATE TABLE turn_search (turn_id varchar(32) PRIMARY KEY, episode_id varchar(32) NOT NULL, "
    "document tsvector NOT NULL)",
    "INSERT INTO turn_search (turn_id, episode_id, document) SELECT p.turn_id, t.episode_id, "
    + _POSTGRES_DOCUMENT.format(row="p") + " FROM turn_payloads AS p JOIN turns AS t ON t.id = p.turn_id",
    "CREATE INDEX ix_turn_search_document ON turn_search USING gin (document)",
    "CREATE INDEX ix_turn_search_episode_id ON turn_search (episode_id)",
    # sparring never deletes, rewrites or moves a turn; the delete and update branches keep the
    # index true when someone does
    "CREATE FUNCTION sparring_index_turn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP <> 'INSERT' THEN DELETE FROM turn_search WHERE turn_id = OLD.turn_id; END IF; "
    "IF TG_OP <> 'DELETE' THEN INSERT INTO turn_search (turn_id, episode_id, document) "
    "SELECT NEW.turn_id, t.episode_id, " + _POSTGRES_DOCUMENT.format(row="NEW")
    + " FROM turns AS t WHERE t.id = NEW.turn_id; END IF; RETURN NULL; END $$",
    "CREATE TRIGGER turn_search_index AFTER INSERT OR DELETE OR UPDATE OF turn_id, response, messages "
    "ON turn_payloads FOR EACH ROW EXECUTE FUNCTION sparring_index_turn()",
    "CREATE FUNCTION sparring_move_turn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "UPDATE turn_search SET episode_id = NEW.episode_id WHERE turn_id = NEW.id; RETURN NULL; END $$",
    "CREATE TRIGGER turn_search_episode AFTER UPDATE OF episode_id ON turns "
    "FOR EACH ROW EXECUTE FUNCTION sparring_move_turn()",
]
_POSTGRES_DOWN = [
    "DROP TRIGGER turn_search_episode ON turns",
    "DROP TRIGGER turn_search_index ON turn_payloads",
    "DROP FUNCTION sparring_move_turn()",
    "DROP FUNCTION sparring_index_turn()",
    "DROP TABLE turn_search",
    "CREATE INDEX ix_turn_payloads_search ON turn_payloads "  # migration 0003's
    "USING gin (to_tsvector('simple'::regconfig, sparring_turn_text(response, messages)))",
]


def _run(statements: dict[str, list[str]]) -> None:
    dialect = op.get_bind().dialect.name
    for statement in statements.get(dialect, []):
        op.execute(statement)


def upgrade() -> None:
    _run({"sqlite": _SQLITE, "postgresql": _POSTGRES})


def downgrade() -> None:
    _run({"sqlite": _SQLITE_DOWN, "postgresql": _POSTGRES_DOWN})
