"""Episodes carry the number of the transaction that ended them, and dataset snapshots the
number they read up to (``storage.commits``), so that a build never misses an episode that
committed late. Episodes logged before this migration have no number: builds select those by
``finished_at`` as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "commit_sequence",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_commit_sequence")),
    )
    op.bulk_insert(table, [{"id": 1, "value": 0}])
    # plain ALTER TABLE ADD COLUMN on both dialects: a batch copy of a large episodes table is not needed
    op.add_column("episodes", sa.Column("commit_seq", sa.BigInteger(), nullable=True))
    op.create_index("ix_episodes_game_commit_seq", "episodes", ["game", "commit_seq"])
    op.add_column("dataset_snapshots", sa.Column("horizon", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("dataset_snapshots", "horizon")  # SQLite 3.35 and later drop columns in place
    op.drop_index("ix_episodes_game_commit_seq", table_name="episodes")
    op.drop_column("episodes", "commit_seq")
    op.drop_table("commit_sequence")
