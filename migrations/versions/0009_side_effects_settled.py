"""side_effects.settled_at: an effect reserved before it is done, settled after

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

A contended effect (a run's ending comment) is reserved before it is
performed and settled once it is done, so a process killed in between leaves
a pending reservation that a later pass takes over, instead of a key that
says the effect happened when it never did. Every key written before this
revision was written once its effect was done: it is settled.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("side_effects") as batch:
        batch.add_column(sa.Column("settled_at", sa.DateTime(), nullable=True))
    op.execute("UPDATE side_effects SET settled_at = created_at")


def downgrade() -> None:
    with op.batch_alter_table("side_effects") as batch:
        batch.drop_column("settled_at")
