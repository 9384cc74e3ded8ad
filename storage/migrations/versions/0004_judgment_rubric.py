"""Judgments name their rubric and may carry a score: a judge that scores one side on a
rubric (fairness, consistency, relevance, ...) is logged as a judgment like a preference.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.add_column(sa.Column("rubric", sa.String(), nullable=True))
        batch.add_column(sa.Column("score", sa.Double(), nullable=True))
        batch.add_column(sa.Column("scored_seat", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_column("scored_seat")
        batch.drop_column("score")
        batch.drop_column("rubric")
