"""Plans stored as changes: the rows each plan wrote; decisions indexed by job then plan.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("stored_lines", sa.Integer(), nullable=True))
    op.create_index("ix_decisions_job_plan", "decisions", ["job_id", "plan_id"])
    op.drop_index("ix_decisions_job_id", table_name="decisions")  # the new index covers it


def downgrade() -> None:
    # Older code reads each plan as its changed lines only; it has no "left the plan" rows.
    op.execute(sa.text("DELETE FROM decisions WHERE kind = 'gone'"))
    op.create_index("ix_decisions_job_id", "decisions", ["job_id"])
    op.drop_index("ix_decisions_job_plan", table_name="decisions")
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("stored_lines")
