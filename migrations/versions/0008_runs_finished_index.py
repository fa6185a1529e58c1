"""Index on runs.finished_at

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

The endings pass asks every few seconds for the runs that ended recently and
were never announced; with this index that is one indexed read whatever the
size of the history.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_finished", "runs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_finished", table_name="runs")
