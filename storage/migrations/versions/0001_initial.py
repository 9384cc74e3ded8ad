"""Initial schema: runs, episodes, turns and their payloads, rewards, judgments, and the
trainer's dataset snapshots, adapter versions, training jobs and evaluations.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(32)
STATUS = sa.String(16)


def _ts(name: str, *, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", ID, nullable=False),
        sa.Column("game", sa.String(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("status", STATUS, nullable=False),
        sa.Column("summary", sa.JSON(), nullable=True),
        _ts("started_at"),
        _ts("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
    )
    op.create_index("ix_runs_status_started_at", "runs", ["status", "started_at"])
    op.create_index("ix_runs_started_at", "runs", ["started_at"])

    op.create_table(
        "episodes",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=True),
        sa.Column("game", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("task_source", sa.String(), nullable=False),
        sa.Column("split", sa.String(), nullable=True),
        sa.Column("difficulty", sa.String(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("status", STATUS, nullable=False),
        sa.Column("reward", sa.Double(), nullable=True),
        sa.Column("num_turns", sa.Integer(), nullable=False),
        sa.Column("error_stage", sa.String(), nullable=True),
        _ts("started_at"),
        _ts("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_episodes"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_episodes_run_id_runs", ondelete="CASCADE"),
    )
    op.create_index("ix_episodes_game_status_started_at", "episodes", ["game", "status", "started_at"])
    op.create_index("ix_episodes_game_started_at", "episodes", ["game", "started_at"])
    op.create_index("ix_episodes_status_started_at", "episodes", ["status", "started_at"])
    op.create_index("ix_episodes_run_id_status", "episodes", ["run_id", "status"])
    op.create_index("ix_episodes_split_game", "episodes", ["split", "game"])
    op.create_index("ix_episodes_task_id", "episodes", ["task_id"])
    op.create_index("ix_episodes_reward", "episodes", ["reward"])
    op.create_index("ix_episodes_started_at", "episodes", ["started_at"])

    op.create_table(
        "episode_payloads",
        sa.Column("episode_id", ID, nullable=False),
        sa.Column("task", sa.JSON(), nullable=False),
        sa.Column("seats", sa.JSON(), nullable=False),
        sa.Column("outcome", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("episode_id", name="pk_episode_payloads"),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name="fk_episode_payloads_episode_id_episodes", ondelete="CASCADE"
        ),
    )

    op.create_table(
        "turns",
        sa.Column("id", ID, nullable=False),
        sa.Column("episode_id", ID, nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("seat", sa.String(), nullable=False),
        sa.Column("seat_kind", STATUS, nullable=False),
        sa.Column("policy", sa.String(), nullable=False),
        sa.Column("served_by", sa.String(), nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("finish_reason", sa.String(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Double(), nullable=False),
        sa.Column("parsed", sa.Boolean(), nullable=True),
        sa.Column("parsed_value", sa.Text(), nullable=True),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_turns"),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name="fk_turns_episode_id_episodes", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_turns_episode_id_idx", "turns", ["episode_id", "idx"])
    op.create_index("ix_turns_seat_episode_id", "turns", ["seat", "episode_id"])
    op.create_index("ix_turns_policy", "turns", ["policy"])
    op.create_index("ix_turns_served_by", "turns", ["served_by"])
    op.create_index("ix_turns_created_at", "turns", ["created_at"])

    op.create_table(
        "turn_payloads",
        sa.Column("turn_id", ID, nullable=False),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("prompt_token_ids", sa.JSON(), nullable=False),
        sa.Column("completion_token_ids", sa.JSON(), nullable=False),
        sa.Column("logprobs", sa.JSON(), nullable=False),
        sa.Column("sampling", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("turn_id", name="pk_turn_payloads"),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], name="fk_turn_payloads_turn_id_turns", ondelete="CASCADE"),
    )

    op.create_table(
        "rewards",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("episode_id", ID, nullable=False),
        sa.Column("turn_id", ID, nullable=True),
        sa.Column("seat", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("info", sa.JSON(), nullable=True),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_rewards"),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name="fk_rewards_episode_id_episodes", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], name="fk_rewards_turn_id_turns", ondelete="SET NULL"),
    )
    op.create_index("ix_rewards_episode_id", "rewards", ["episode_id"])
    op.create_index("ix_rewards_turn_id", "rewards", ["turn_id"])
    op.create_index("ix_rewards_seat_name", "rewards", ["seat", "name"])

    op.create_table(
        "judgments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("episode_id", ID, nullable=False),
        sa.Column("judge_seat", sa.String(), nullable=False),
        sa.Column("judge_policy", sa.String(), nullable=False),
        sa.Column("judge_turn_id", ID, nullable=True),
        sa.Column("winner_seat", sa.String(), nullable=True),
        sa.Column("loser_seat", sa.String(), nullable=True),
        sa.Column("preferred_turn_id", ID, nullable=True),
        sa.Column("rejected_turn_id", ID, nullable=True),
        sa.Column("rationale", sa.Text(), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_judgments"),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name="fk_judgments_episode_id_episodes", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["judge_turn_id"], ["turns.id"], name="fk_judgments_judge_turn_id_turns", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["preferred_turn_id"], ["turns.id"], name="fk_judgments_preferred_turn_id_turns", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["rejected_turn_id"], ["turns.id"], name="fk_judgments_rejected_turn_id_turns", ondelete="SET NULL"
        ),
    )
    op.create_index("ix_judgments_episode_id", "judgments", ["episode_id"])
    op.create_index("ix_judgments_judge_seat_created_at", "judgments", ["judge_seat", "created_at"])

    op.create_table(
        "dataset_snapshots",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", STATUS, nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("game", sa.String(), nullable=True),
        sa.Column("base_model", sa.String(), nullable=False),
        sa.Column("filter_spec", sa.JSON(), nullable=False),
        _ts("watermark", nullable=True),
        sa.Column("row_count", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("content_hash", sa.String(128), nullable=True),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_dataset_snapshots"),
    )
    op.create_index("ix_dataset_snapshots_role_kind_created_at", "dataset_snapshots", ["role", "kind", "created_at"])

    op.create_table(
        "adapter_versions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("base_model", sa.String(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("dataset_snapshot_id", sa.Integer(), nullable=True),
        sa.Column("trainer", sa.String(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("status", STATUS, nullable=False),
        sa.Column("eval", sa.JSON(), nullable=True),
        _ts("created_at"),
        _ts("promoted_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_adapter_versions"),
        sa.UniqueConstraint("role", "version", name="uq_adapter_versions_role_version"),
        sa.UniqueConstraint("name", name="uq_adapter_versions_name"),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["adapter_versions.id"], name="fk_adapter_versions_parent_id_adapter_versions"
        ),
        sa.ForeignKeyConstraint(
            ["dataset_snapshot_id"],
            ["dataset_snapshots.id"],
            name="fk_adapter_versions_dataset_snapshot_id_dataset_snapshots",
        ),
    )
    op.create_index("ix_adapter_versions_role_status", "adapter_versions", ["role", "status"])

    op.create_table(
        "training_jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", STATUS, nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("status", STATUS, nullable=False),
        sa.Column("dataset_snapshot_id", sa.Integer(), nullable=True),
        sa.Column("adapter_version_id", sa.Integer(), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        _ts("created_at"),
        _ts("started_at", nullable=True),
        _ts("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_training_jobs"),
        sa.ForeignKeyConstraint(
            ["dataset_snapshot_id"],
            ["dataset_snapshots.id"],
            name="fk_training_jobs_dataset_snapshot_id_dataset_snapshots",
        ),
        sa.ForeignKeyConstraint(
            ["adapter_version_id"],
            ["adapter_versions.id"],
            name="fk_training_jobs_adapter_version_id_adapter_versions",
        ),
    )
    op.create_index("ix_training_jobs_status_created_at", "training_jobs", ["status", "created_at"])
    op.create_index("ix_training_jobs_role_created_at", "training_jobs", ["role", "created_at"])

    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("adapter_version_id", sa.Integer(), nullable=False),
        sa.Column("baseline_version_id", sa.Integer(), nullable=True),
        sa.Column("game", sa.String(), nullable=False),
        sa.Column("split", sa.String(), nullable=False),
        sa.Column("n_tasks", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_evaluations"),
        sa.ForeignKeyConstraint(
            ["adapter_version_id"],
            ["adapter_versions.id"],
            name="fk_evaluations_adapter_version_id_adapter_versions",
        ),
        sa.ForeignKeyConstraint(
            ["baseline_version_id"],
            ["adapter_versions.id"],
            name="fk_evaluations_baseline_version_id_adapter_versions",
        ),
    )
    op.create_index(
        "ix_evaluations_adapter_version_id_created_at", "evaluations", ["adapter_version_id", "created_at"]
    )


def downgrade() -> None:
    for table in (
        "evaluations",
        "training_jobs",
        "adapter_versions",
        "dataset_snapshots",
        "judgments",
        "rewards",
        "turn_payloads",
        "turns",
        "episode_payloads",
        "episodes",
        "runs",
    ):
        op.drop_table(table)
