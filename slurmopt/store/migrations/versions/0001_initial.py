"""The first schema: managed jobs and their transitions, plans, history, leases.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

State and reason columns are plain strings (no database enum, no CHECK
constraint), so new states and reasons need no migration.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ENUM = sa.String(length=40)
NAME = sa.String(length=255)


def upgrade() -> None:
    op.create_table(
        "managed_jobs",
        sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("slurm_submit_time", sa.Double(), nullable=False),
        sa.Column("state", ENUM, nullable=False),
        sa.Column("nodes", sa.Text(), nullable=True),
        sa.Column("reason", ENUM, nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("expected_start", sa.Double(), nullable=True),
        sa.Column("priority_before_hold", sa.BigInteger(), nullable=True),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("elastic_min_nodes", sa.Integer(), nullable=True),
        sa.Column("elastic_max_nodes", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_managed_jobs"),
    )
    op.create_index("ix_managed_jobs_state", "managed_jobs", ["state"])

    op.create_table(
        "job_transitions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("slurm_submit_time", sa.Double(), nullable=False),
        sa.Column("from_state", ENUM, nullable=True),
        sa.Column("to_state", ENUM, nullable=False),
        sa.Column("reason", ENUM, nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("key", NAME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_transitions"),
        sa.UniqueConstraint("key", name="uq_job_transitions_key"),
    )
    op.create_index(
        "ix_job_transitions_job", "job_transitions", ["job_id", "slurm_submit_time", "id"]
    )

    op.create_table(
        "plans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("taken_at", sa.Double(), nullable=False),
        sa.Column("planned_at", sa.Double(), nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        sa.Column("starts", sa.Integer(), nullable=False),
        sa.Column("reservations", sa.Integer(), nullable=False),
        sa.Column("unplaced", sa.Integer(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_plans"),
    )
    op.create_index("ix_plans_taken_at", "plans", ["taken_at"])

    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", ENUM, nullable=False),
        sa.Column("reason", ENUM, nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("nodes", sa.Text(), nullable=True),
        sa.Column("start_time", sa.Double(), nullable=True),
        sa.Column("at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name="fk_decisions_plan_id_plans", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_decisions"),
    )
    op.create_index("ix_decisions_job_id", "decisions", ["job_id"])
    op.create_index("ix_decisions_plan_id", "decisions", ["plan_id"])

    op.create_table(
        "fragmentation_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("partition", NAME, nullable=True),
        sa.Column("total_gpus", sa.Integer(), nullable=False),
        sa.Column("allocated_gpus", sa.Integer(), nullable=False),
        sa.Column("unavailable_gpus", sa.Integer(), nullable=False),
        sa.Column("free_gpus", sa.Integer(), nullable=False),
        sa.Column("stranded_gpus", sa.Integer(), nullable=False),
        sa.Column("fragmentation_index", sa.Double(), nullable=False),
        sa.Column("largest_job_nodes", sa.Integer(), nullable=False),
        sa.Column("largest_single_leaf_job_nodes", sa.Integer(), nullable=False),
        sa.Column("fgd_unusable_share", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_fragmentation_samples"),
    )
    op.create_index("ix_fragmentation_samples_at", "fragmentation_samples", ["at"])

    op.create_table(
        "preemptions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=True),
        sa.Column("victim_job_id", sa.BigInteger(), nullable=False),
        sa.Column("victim_submit_time", sa.Double(), nullable=False),
        sa.Column("for_job_id", sa.BigInteger(), nullable=True),
        sa.Column("signal", ENUM, nullable=False),
        sa.Column("signalled_at", sa.Double(), nullable=False),
        sa.Column("ack_at", sa.Double(), nullable=True),
        sa.Column("checkpoint_step", sa.BigInteger(), nullable=True),
        sa.Column("outcome", ENUM, nullable=True),
        sa.Column("lost_gpu_seconds", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name="fk_preemptions_plan_id_plans", ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_preemptions"),
    )
    op.create_index("ix_preemptions_victim_job_id", "preemptions", ["victim_job_id"])

    op.create_table(
        "node_health",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node", NAME, nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("source", ENUM, nullable=False),
        sa.Column("status", ENUM, nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_node_health"),
    )
    op.create_index("ix_node_health_node_at", "node_health", ["node", "at"])

    op.create_table(
        "leases",
        sa.Column("name", NAME, nullable=False),
        sa.Column("holder", NAME, nullable=False),
        sa.Column("acquired_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
    )

    op.create_table(
        "heartbeat",
        sa.Column("name", NAME, nullable=False),
        sa.Column("holder", NAME, nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_heartbeat"),
    )


def downgrade() -> None:
    for table in (
        "heartbeat",
        "leases",
        "node_health",
        "preemptions",
        "fragmentation_samples",
        "decisions",
        "plans",
        "job_transitions",
        "managed_jobs",
    ):
        op.drop_table(table)
