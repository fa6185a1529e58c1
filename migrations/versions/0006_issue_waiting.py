"""issues.waiting_reason: why intake holds a ready issue back (its dependencies)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

An issue that says ``Depends on #12`` is not queued while #12 is open; the
dashboard and ``pipeline runs list`` show it as waiting, with this reason.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("issues") as batch:
        batch.add_column(sa.Column("waiting_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("waiting_since", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("issues") as batch:
        batch.drop_column("waiting_since")
        batch.drop_column("waiting_reason")
