"""Runs get a parent: the run of a `sparring play --workers N` command, for its workers' runs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("parent_id", sa.String(32), nullable=True))
    op.create_index("ix_runs_parent_id", "runs", ["parent_id"])


def downgrade() -> None:
    op.drop_index("ix_runs_parent_id", table_name="runs")
    op.drop_column("runs", "parent_id")
