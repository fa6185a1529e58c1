"""Indexes on runs.parent_id and escalations.run_id

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23

Pruning old runs checks that no run (a fix-forward, a resume) and no
escalation still points at them; without these indexes PostgreSQL scans both
tables once per pruned batch.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_parent", "runs", ["parent_id"])
    op.create_index("ix_escalations_run", "escalations", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_escalations_run", table_name="escalations")
    op.drop_index("ix_runs_parent", table_name="runs")
