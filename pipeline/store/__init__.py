"""The store: history and queue in SQLite or PostgreSQL, spoken to in domain verbs.

Only this package imports SQLAlchemy. Everything else calls ``Store`` methods
and gets plain records (``pipeline.store.records``) back; the scheduler, intake
and the API see it through the narrower views of ``pipeline.store.roles``.
The store decides no policy: priorities, budgets and escalations are the
callers'. Its parts: ``runs`` (enqueue, cancel, retry), ``fenced`` (a worker's
lease-checked writes), ``claim`` (claiming, the sweeper), ``history``,
``repos``, ``escalations`` (the open ones, acknowledging them), ``issues``,
``outbox`` (notifications until delivered), ``retention``
(pruning old history, exports), ``totals`` (aggregates for metrics), ``leader``
(which replica exports them), ``waiting`` (ready issues held back by their
dependencies).
"""

from __future__ import annotations

from pipeline.store import migrate
from pipeline.store.claim import ClaimMixin, SweepReport
from pipeline.store.db_errors import describe_db_error
from pipeline.store.escalations import AckRefused, EscalationsMixin
from pipeline.store.fenced import FencedMixin, Heartbeat
from pipeline.store.history import HistoryMixin
from pipeline.store.issues import (
    Claim,
    IssuesMixin,
    IssueSnapshot,
    LocalComment,
    LocalIssue,
    SeenIssue,
    UnknownIssue,
)
from pipeline.store.leader import LeaderMixin
from pipeline.store.outbox import (
    Attempt,
    Channel,
    Notification,
    NotificationCounts,
    NotificationDraft,
    OutboxMixin,
)
from pipeline.store.records import Escalation, Issue, Repo, Run, RunEvent, RunFilter, Stats
from pipeline.store.repos import RepoFreeze, ReposMixin, UnknownRepo
from pipeline.store.retention import PruneReport, RetentionMixin, RetentionPolicy
from pipeline.store.runs import (
    EnqueueOptions,
    EnqueueResult,
    QueueFull,
    RunNotRetryable,
    RunsMixin,
    UnknownRun,
)
from pipeline.store.totals import Histogram, RepoSpend, TotalsMixin
from pipeline.store.waiting import FrozenWait, WaitingIssue, WaitingMixin


class Store(
    HistoryMixin,
    ReposMixin,
    EscalationsMixin,
    IssuesMixin,
    RunsMixin,
    FencedMixin,
    ClaimMixin,
    OutboxMixin,
    RetentionMixin,
    TotalsMixin,
    LeaderMixin,
    WaitingMixin,
):
    """All domain verbs over one engine."""

    def close(self) -> None:
        self.release_metrics_lead()
        super().close()

    def upgrade(self) -> None:
        """Apply migrations up to head (idempotent)."""
        migrate.upgrade(self.engine)

    def schema_current(self) -> bool:
        return migrate.current_revision(self.engine) == migrate.head_revision()

    def schema_problem(self) -> str | None:
        """None when the schema is this release's; else what is wrong and what to do."""
        return migrate.schema_problem(self.engine)


__all__ = [
    "AckRefused",
    "Attempt",
    "Channel",
    "Claim",
    "EnqueueOptions",
    "EnqueueResult",
    "Escalation",
    "FrozenWait",
    "Heartbeat",
    "Histogram",
    "Issue",
    "IssueSnapshot",
    "LocalComment",
    "LocalIssue",
    "Notification",
    "NotificationCounts",
    "NotificationDraft",
    "PruneReport",
    "QueueFull",
    "Repo",
    "RepoFreeze",
    "RepoSpend",
    "RetentionPolicy",
    "Run",
    "RunEvent",
    "RunFilter",
    "RunNotRetryable",
    "SeenIssue",
    "Stats",
    "Store",
    "SweepReport",
    "UnknownIssue",
    "UnknownRepo",
    "UnknownRun",
    "WaitingIssue",
    "describe_db_error",
]
