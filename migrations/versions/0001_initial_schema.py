"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "local_issues",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("labels_json", sa.Text(), nullable=False),
        sa.Column("labeller", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_local_issues")),
    )
    op.create_table(
        "repos",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("tracker", sa.String(length=100), nullable=False),
        sa.Column("slug", sa.String(length=300), nullable=False),
        sa.Column("default_branch", sa.String(length=200), nullable=False),
        sa.Column("settings_json", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("frozen_reason", sa.Text(), nullable=True),
        sa.Column("frozen_run_id", sa.Integer(), nullable=True),
        sa.Column("frozen_by", sa.String(length=200), nullable=True),
        sa.Column("frozen_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repos")),
        sa.UniqueConstraint("name", name=op.f("uq_repos_name")),
    )
    op.create_table(
        "side_effects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_side_effects")),
        sa.UniqueConstraint("key", name=op.f("uq_side_effects_key")),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tracker", sa.String(length=100), nullable=False),
        sa.Column("delivery_id", sa.String(length=200), nullable=False),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint(
            "tracker", "delivery_id", name=op.f("uq_webhook_deliveries_tracker_delivery_id")
        ),
    )
    op.create_table(
        "issues",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo_id", sa.Integer(), nullable=False),
        sa.Column("tracker", sa.String(length=100), nullable=False),
        sa.Column("external_id", sa.String(length=100), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("labeller", sa.String(length=200), nullable=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("etag", sa.String(length=200), nullable=True),
        sa.Column("remote_updated_at", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["repo_id"], ["repos.id"], name=op.f("fk_issues_repo_id_repos")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_issues")),
        sa.UniqueConstraint("repo_id", "number", name=op.f("uq_issues_repo_id_number")),
    )
    op.create_table(
        "local_comments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("issue_id", sa.Integer(), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["issue_id"], ["local_issues.id"], name=op.f("fk_local_comments_issue_id_local_issues")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_local_comments")),
    )
    with op.batch_alter_table("local_comments", schema=None) as batch_op:
        batch_op.create_index("ix_local_comments_issue", ["issue_id", "id"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo_id", sa.Integer(), nullable=False),
        sa.Column("issue_id", sa.Integer(), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("recoveries", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("run_after", sa.DateTime(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("deadline_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("timeout_s", sa.Float(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error_class", sa.String(length=50), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("base_sha", sa.String(length=64), nullable=True),
        sa.Column("head_sha", sa.String(length=64), nullable=True),
        sa.Column("pushed_sha", sa.String(length=64), nullable=True),
        sa.Column("branch", sa.String(length=300), nullable=True),
        sa.Column("worktree", sa.Text(), nullable=True),
        sa.Column("agent_session", sa.String(length=200), nullable=True),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("num_turns", sa.Integer(), nullable=False),
        sa.Column("setup_s", sa.Float(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("requested_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["issue_id"], ["issues.id"], name=op.f("fk_runs_issue_id_issues")),
        sa.ForeignKeyConstraint(["parent_id"], ["runs.id"], name=op.f("fk_runs_parent_id_runs")),
        sa.ForeignKeyConstraint(["repo_id"], ["repos.id"], name=op.f("fk_runs_repo_id_repos")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_claim", ["state", "repo_id", "priority", "id"], unique=False)
        batch_op.create_index("ix_runs_repo_created", ["repo_id", "created_at"], unique=False)
        batch_op.create_index(
            "ix_runs_queue_order",
            [sa.text("priority DESC"), "id"],
            unique=False,
            sqlite_where=sa.text("state = 'queued'"),
            postgresql_where=sa.text("state = 'queued'"),
        )
        batch_op.create_index(
            "uq_runs_active_issue",
            ["issue_id"],
            unique=True,
            sqlite_where=sa.text(
                "issue_id IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'escalated', 'cancelled')"
            ),
            postgresql_where=sa.text(
                "issue_id IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'escalated', 'cancelled')"
            ),
        )
        batch_op.create_index(
            "uq_runs_busy_repo",
            ["repo_id"],
            unique=True,
            sqlite_where=sa.text(
                "state IN ('preparing', 'implementing', 'testing', 'publishing', 'watching')"
            ),
            postgresql_where=sa.text(
                "state IN ('preparing', 'implementing', 'testing', 'publishing', 'watching')"
            ),
        )

    op.create_table(
        "escalations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("repo_id", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(length=100), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("notified", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("acknowledged_by", sa.String(length=200), nullable=True),
        sa.Column("acknowledged_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["repo_id"], ["repos.id"], name=op.f("fk_escalations_repo_id_repos")
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_escalations_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_escalations")),
    )
    op.create_table(
        "run_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("ts", sa.DateTime(), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data_json", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_events_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_events")),
    )
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.create_index("ix_run_events_run", ["run_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.drop_index("ix_run_events_run")

    op.drop_table("run_events")
    op.drop_table("escalations")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_runs_busy_repo",
            sqlite_where=sa.text(
                "state IN ('preparing', 'implementing', 'testing', 'publishing', 'watching')"
            ),
            postgresql_where=sa.text(
                "state IN ('preparing', 'implementing', 'testing', 'publishing', 'watching')"
            ),
        )
        batch_op.drop_index(
            "uq_runs_active_issue",
            sqlite_where=sa.text(
                "issue_id IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'escalated', 'cancelled')"
            ),
            postgresql_where=sa.text(
                "issue_id IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'escalated', 'cancelled')"
            ),
        )
        batch_op.drop_index("ix_runs_queue_order")
        batch_op.drop_index("ix_runs_repo_created")
        batch_op.drop_index("ix_runs_claim")

    op.drop_table("runs")
    with op.batch_alter_table("local_comments", schema=None) as batch_op:
        batch_op.drop_index("ix_local_comments_issue")

    op.drop_table("local_comments")
    op.drop_table("issues")
    op.drop_table("webhook_deliveries")
    op.drop_table("side_effects")
    op.drop_table("repos")
    op.drop_table("local_issues")
