"""runs.progress_comment_id: the run's one progress comment on its issue

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

A run keeps one progress comment on its issue and edits it in place; its
forge id is recorded here so a restarted run edits the same comment.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("progress_comment_id", sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("progress_comment_id")
