"""Commit numbers: which episodes a dataset build may read, whatever order writers commit in.

A build that continued from the newest ``finished_at`` it read would miss an episode that
finished earlier but committed later (another process, machine or Ray worker still writing
it). So each transaction that ends episodes takes the next number from the one-row table
``commit_sequence`` as its last statement and stamps them with it (``episodes.commit_seq``).
Taking the number locks that row until the transaction commits (PostgreSQL's row lock;
SQLite has one writer at a time), so numbers follow commit order: once a number is visible,
every smaller one is committed or rolled back.

A build reads the episodes numbered below its **horizon**, the last committed number plus
one, read before anything else; a transaction still running holds a number at least that
large, so its episodes go to the next build, which reads from this horizon on. No episode is
read twice or skipped, however late it commits.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, bindparam, select, update

from storage.tables import COMMIT_SEQUENCE as _SEQUENCE
from storage.tables import EPISODES as _EPISODES

ROW_ID = 1
"""the id of the table's one row (inserted by migration 0007)"""

_TAKE = (
    update(_SEQUENCE).where(_SEQUENCE.c.id == ROW_ID).values(value=_SEQUENCE.c.value + 1)
    .returning(_SEQUENCE.c.value)
)
_STAMP = update(_EPISODES).where(_EPISODES.c.id == bindparam("b_id")).values(commit_seq=bindparam("b_seq"))


def stamp_ended(conn: Connection, episode_ids: Iterable[str]) -> int | None:
    """Number the episodes this transaction ends; call it last, just before the commit (the
    number's row stays locked until then). Returns the number (None: no episode given)."""
    ids = list(dict.fromkeys(episode_ids))
    if not ids:
        return None
    seq = conn.execute(_TAKE).scalar_one()
    conn.execute(_STAMP, [{"b_id": episode_id, "b_seq": seq} for episode_id in ids])
    return seq


def horizon(conn: Connection) -> int:
    """One more than the last committed number: every episode numbered below it is committed,
    and every transaction still running will number its episodes at or above it."""
    return int(conn.execute(select(_SEQUENCE.c.value).where(_SEQUENCE.c.id == ROW_ID)).scalar_one()) + 1
