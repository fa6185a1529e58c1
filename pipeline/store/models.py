"""SQLAlchemy models: the run history and the queue, one schema for both engines.

Free-text columns are ``Masked*`` types (``pipeline.store.masked``): secrets are
masked in them on every write and read, whichever verb touches them. Names people
only read (who wrote, labelled, asked, froze, acknowledged) are ``ShownName``
(``pipeline.store.shown``): a longer one is cut to its column with a marker.

Two partial unique indexes carry the core guarantees in the database itself,
so that neither a crash nor a second replica can break them:

- ``uq_runs_active_issue``: at most one non-terminal run per issue;
- ``uq_runs_busy_repo``: at most one run past ``queued`` per repo;
- ``uq_runs_busy_slot``: no two busy runs hold the same one of the
  ``max_concurrency`` slots, so the global cap needs no global lock (ADR 0019).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from pipeline.core.states import ALL_STATES as ALL_STATES
from pipeline.core.states import BUSY_STATES as BUSY_STATES
from pipeline.core.states import TERMINAL_STATES as TERMINAL_STATES
from pipeline.core.states import WAITING_STATES as WAITING_STATES
from pipeline.store.masked import MaskedJson, MaskedString, MaskedText
from pipeline.store.shown import FittedKey, ShownName

_TERMINAL_SQL = ", ".join(f"'{s}'" for s in TERMINAL_STATES)
_BUSY_SQL = ", ".join(f"'{s}'" for s in BUSY_STATES)
ACTIVE_ISSUE_WHERE = f"issue_id IS NOT NULL AND state NOT IN ({_TERMINAL_SQL})"
BUSY_REPO_WHERE = f"state IN ({_BUSY_SQL})"
QUEUED_WHERE = "state = 'queued'"

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class RepoRow(Base):
    __tablename__ = "repos"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    tracker: Mapped[str] = mapped_column(String(100))
    slug: Mapped[str] = mapped_column(String(300))
    default_branch: Mapped[str] = mapped_column(String(200), default="main")
    settings_json: Mapped[str] = mapped_column(Text, default="{}")
    state: Mapped[str] = mapped_column(String(20), default="active")
    frozen_reason: Mapped[str | None] = mapped_column(MaskedText)
    frozen_run_id: Mapped[int | None] = mapped_column(Integer)
    frozen_by: Mapped[str | None] = mapped_column(ShownName(200))
    frozen_at: Mapped[datetime | None] = mapped_column(DateTime)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class IssueRow(Base):
    __tablename__ = "issues"
    __table_args__ = (UniqueConstraint("repo_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repos.id"))
    tracker: Mapped[str] = mapped_column(String(100))
    external_id: Mapped[str] = mapped_column(String(100), default="")
    number: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(MaskedText, default="")
    author: Mapped[str] = mapped_column(ShownName(200), default="")
    labeller: Mapped[str | None] = mapped_column(ShownName(200))
    url: Mapped[str] = mapped_column(MaskedText, default="")
    etag: Mapped[str | None] = mapped_column(String(200))
    remote_updated_at: Mapped[str | None] = mapped_column(String(64))
    # The issue as intake first saw it with the trusted ready label (see IssueSnapshot).
    labelled_at: Mapped[str | None] = mapped_column(String(64))
    labelled_title: Mapped[str | None] = mapped_column(Text)
    labelled_body: Mapped[str | None] = mapped_column(Text)
    labelled_remote_updated_at: Mapped[str | None] = mapped_column(String(64))
    snapshot_taken_at: Mapped[datetime | None] = mapped_column(DateTime)
    # Why intake is not starting it yet (an open dependency, a cycle), or None.
    waiting_reason: Mapped[str | None] = mapped_column(Text)
    waiting_since: Mapped[datetime | None] = mapped_column(DateTime)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index(
            "uq_runs_active_issue",
            "issue_id",
            unique=True,
            sqlite_where=text(ACTIVE_ISSUE_WHERE),
            postgresql_where=text(ACTIVE_ISSUE_WHERE),
        ),
        Index(
            "uq_runs_busy_repo",
            "repo_id",
            unique=True,
            sqlite_where=text(BUSY_REPO_WHERE),
            postgresql_where=text(BUSY_REPO_WHERE),
        ),
        Index(
            "uq_runs_busy_slot",
            "slot",
            unique=True,
            sqlite_where=text(BUSY_REPO_WHERE),
            postgresql_where=text(BUSY_REPO_WHERE),
        ),
        Index("ix_runs_claim", "state", "repo_id", "priority", "id"),
        Index("ix_runs_repo_created", "repo_id", "created_at"),
        Index("ix_runs_parent", "parent_id"),
        Index("ix_runs_finished", "finished_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repos.id"))
    issue_id: Mapped[int | None] = mapped_column(ForeignKey("issues.id"))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    kind: Mapped[str] = mapped_column(String(20), default="issue")
    state: Mapped[str] = mapped_column(String(20), default="queued")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    recoveries: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    run_after: Mapped[datetime] = mapped_column(DateTime)
    owner: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime)
    started_at: Mapped[datetime | None] = mapped_column(DateTime)
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    timeout_s: Mapped[float | None] = mapped_column(Float)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    error_class: Mapped[str | None] = mapped_column(String(50))
    error: Mapped[str | None] = mapped_column(MaskedText)
    base_sha: Mapped[str | None] = mapped_column(String(64))
    head_sha: Mapped[str | None] = mapped_column(String(64))
    pushed_sha: Mapped[str | None] = mapped_column(String(64))
    branch: Mapped[str | None] = mapped_column(String(300))
    worktree: Mapped[str | None] = mapped_column(Text)
    agent_session: Mapped[str | None] = mapped_column(MaskedString(200))
    tokens_in: Mapped[int] = mapped_column(Integer, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    num_turns: Mapped[int] = mapped_column(Integer, default=0)
    setup_s: Mapped[float | None] = mapped_column(Float)
    summary: Mapped[str | None] = mapped_column(MaskedText)
    requested_by: Mapped[str | None] = mapped_column(ShownName(200))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    # The cap slot a busy run holds (PostgreSQL claims; NULL on SQLite and when not busy).
    slot: Mapped[int | None] = mapped_column(Integer)
    # The forge's id of the run's one progress comment on its issue, once posted.
    progress_comment_id: Mapped[str | None] = mapped_column(String(100))


# The claim order (priority first, then age) over queued runs only, so a claim walks
# the index and stops at the first eligible run instead of sorting the whole queue.
Index(
    "ix_runs_queue_order",
    RunRow.priority.desc(),
    RunRow.id,
    sqlite_where=text(QUEUED_WHERE),
    postgresql_where=text(QUEUED_WHERE),
)


class RunEventRow(Base):
    __tablename__ = "run_events"
    __table_args__ = (Index("ix_run_events_run", "run_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    ts: Mapped[datetime] = mapped_column(DateTime)
    kind: Mapped[str] = mapped_column(String(30))
    message: Mapped[str] = mapped_column(MaskedText)
    data_json: Mapped[str] = mapped_column(MaskedJson, default="{}")


class EscalationRow(Base):
    __tablename__ = "escalations"
    __table_args__ = (Index("ix_escalations_run", "run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    repo_id: Mapped[int] = mapped_column(ForeignKey("repos.id"))
    reason: Mapped[str] = mapped_column(String(100))
    detail: Mapped[str] = mapped_column(MaskedText, default="")
    notified: Mapped[str] = mapped_column(MaskedText, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime)
    acknowledged_by: Mapped[str | None] = mapped_column(ShownName(200))
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime)


class SideEffectRow(Base):
    """Idempotency keys for effects outside the database (comments, labels, pushes).

    A component records ``key`` in the same breath as it performs the effect, so
    a retry or a restart finds it and does not repeat the effect. A key taken
    before its effect (``claim_pending``) stays pending (``settled_at`` NULL)
    until the effect is done; a pending key older than a lease belongs to a
    process that died, and the effect is checked for and done again.
    """

    __tablename__ = "side_effects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(FittedKey(300), unique=True)
    run_id: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(MaskedText, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime)
    settled_at: Mapped[datetime | None] = mapped_column(DateTime)


class WebhookDeliveryRow(Base):
    """Delivery ids already handled, so a replayed delivery is ignored."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("tracker", "delivery_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tracker: Mapped[str] = mapped_column(String(100))
    delivery_id: Mapped[str] = mapped_column(String(200))
    received_at: Mapped[datetime] = mapped_column(DateTime)


class LocalIssueRow(Base):
    """Issues of the embedded local tracker, kept in the daemon's own database."""

    __tablename__ = "local_issues"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(MaskedText)
    body: Mapped[str] = mapped_column(MaskedText, default="")
    author: Mapped[str] = mapped_column(ShownName(200), default="")
    state: Mapped[str] = mapped_column(String(20), default="open")
    labels_json: Mapped[str] = mapped_column(Text, default="[]")
    labeller: Mapped[str | None] = mapped_column(ShownName(200))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class LocalCommentRow(Base):
    __tablename__ = "local_comments"
    __table_args__ = (Index("ix_local_comments_issue", "issue_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    issue_id: Mapped[int] = mapped_column(ForeignKey("local_issues.id"))
    author: Mapped[str] = mapped_column(ShownName(200), default="")
    body: Mapped[str] = mapped_column(MaskedText)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class NotificationRow(Base):
    """The outbox: one row per notification and channel, until it is delivered.

    ``channel_key`` is a digest of the channel's URL (which holds its secrets and
    stays in the config); ``channel`` is its name without secrets. A row is
    ``pending`` until delivered, then ``delivered``, or ``abandoned`` when it
    could not be delivered in time or its channel left the config.
    """

    __tablename__ = "notifications"
    __table_args__ = (
        Index("ix_notifications_due", "state", "next_attempt_at"),
        Index("ix_notifications_run", "run_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    kind: Mapped[str] = mapped_column(String(30))
    channel: Mapped[str] = mapped_column(ShownName(300))
    channel_key: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(MaskedText)
    body: Mapped[str] = mapped_column(MaskedText)
    state: Mapped[str] = mapped_column(String(20), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime)
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime)
    last_error: Mapped[str | None] = mapped_column(MaskedText)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime)
