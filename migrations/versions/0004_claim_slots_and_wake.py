"""runs.slot: the global cap held by the database; wake listeners on PostgreSQL

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-23

A busy run holds one of ``max_concurrency`` slots, and ``uq_runs_busy_slot``
lets no two busy runs hold the same one, so the cap is enforced without a
global lock (docs/adr/0019). On PostgreSQL, triggers ``NOTIFY`` the
``afk_runs`` channel when a run becomes claimable or a busy run ends, so
every replica's claimer wakes at once (docs/adr/0020).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BUSY_SQL = "('preparing', 'implementing', 'testing', 'publishing', 'watching')"
BUSY_WHERE = f"state IN {BUSY_SQL}"

NOTIFY_FUNCTION = """
CREATE OR REPLACE FUNCTION afk_runs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('afk_runs', '');
    RETURN NULL;
END $$
"""
TRIGGERS = {
    "afk_runs_wake_insert": "AFTER INSERT ON runs FOR EACH ROW WHEN (NEW.state = 'queued')",
    "afk_runs_wake_update": (
        "AFTER UPDATE OF state ON runs FOR EACH ROW WHEN ("
        "(NEW.state = 'queued' AND OLD.state <> 'queued') "
        f"OR (OLD.state IN {BUSY_SQL} AND NEW.state NOT IN {BUSY_SQL}))"
    ),
}


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("slot", sa.Integer(), nullable=True))
        batch.create_index(
            "uq_runs_busy_slot",
            ["slot"],
            unique=True,
            sqlite_where=sa.text(BUSY_WHERE),
            postgresql_where=sa.text(BUSY_WHERE),
        )
    # Runs busy during the upgrade keep their place under the cap.
    op.execute(
        "UPDATE runs SET slot = (SELECT COUNT(*) FROM runs AS b "
        f"WHERE b.{BUSY_WHERE} AND b.id < runs.id) WHERE {BUSY_WHERE}"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(NOTIFY_FUNCTION)
        for name, when in TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} EXECUTE FUNCTION afk_runs_notify()")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON runs")
        op.execute("DROP FUNCTION IF EXISTS afk_runs_notify()")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("uq_runs_busy_slot")
        batch.drop_column("slot")
