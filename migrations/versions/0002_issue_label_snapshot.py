"""issues: the title and body as intake first saw them with the trusted label

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = (
    ("labelled_at", sa.String(length=64)),
    ("labelled_title", sa.Text()),
    ("labelled_body", sa.Text()),
    ("labelled_remote_updated_at", sa.String(length=64)),
    ("snapshot_taken_at", sa.DateTime()),
)


def upgrade() -> None:
    with op.batch_alter_table("issues") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("issues") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
