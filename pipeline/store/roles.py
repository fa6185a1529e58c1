"""The store by role: each consumer sees only the verbs it uses.

``Store`` has them all; the scheduler, intake and the HTTP API are typed
against these narrower views, so what each of them may do to the history is
written down here, and a fake for one of them needs only its few verbs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Protocol, Unpack

from pipeline.store.claim import SweepReport
from pipeline.store.fenced import FinishDetails, Heartbeat, RetryDetails
from pipeline.store.issues import SeenIssue
from pipeline.store.outbox import NotificationCounts
from pipeline.store.records import Escalation, Issue, Repo, Run, RunEvent, RunFilter, Stats
from pipeline.store.repos import FreezePolicy
from pipeline.store.retention import Progress, PruneReport, RetentionPolicy
from pipeline.store.runs import EnqueueOptions, EnqueueResult
from pipeline.store.totals import Histogram, RepoSpend
from pipeline.store.waiting import WaitingIssue


class WorkerStore(Protocol):
    """A worker's writes about the run it holds, each checked against its lease."""

    def append_event_fenced(
        self,
        run_id: int,
        owner: str,
        attempt: int,
        kind: str,
        message: str,
        data: Mapping[str, object] | None = None,
    ) -> None: ...

    def transition(
        self,
        run_id: int,
        owner: str,
        attempt: int,
        to_state: str,
        message: str | None = None,
        **fields: object,
    ) -> Run: ...

    def update_run(self, run_id: int, owner: str, attempt: int, **fields: object) -> None: ...

    def finish(
        self,
        run_id: int,
        owner: str,
        attempt: int,
        state: str,
        **details: Unpack[FinishDetails],
    ) -> Run: ...

    def schedule_retry(
        self, run_id: int, owner: str, attempt: int, **failure: Unpack[RetryDetails]
    ) -> Run: ...


class QueueStore(WorkerStore, Protocol):
    """The scheduler: claim, renew leases, sweep, and its workers' fenced writes."""

    url: str

    def claim_next(
        self,
        owner: str,
        *,
        max_concurrency: int,
        lease_s: float,
        exclude_repo_ids: Collection[int] = (),
    ) -> Run | None: ...

    def heartbeat(self, run_id: int, owner: str, attempt: int, lease_s: float) -> Heartbeat: ...

    def sweep(
        self, *, max_recoveries: int, freeze_policy: FreezePolicy | None = None
    ) -> SweepReport: ...

    def next_due_s(self) -> float | None: ...


class IntakeStore(Protocol):
    """Intake: record what a tracker shows, queue it, drop replayed webhooks."""

    def issues_in_queue(self) -> set[tuple[str, int]]: ...

    def upsert_issue(self, repo: str, issue: SeenIssue) -> Issue: ...

    def enqueue(self, repo: str, options: EnqueueOptions | None = None) -> EnqueueResult: ...

    def record_delivery(self, tracker: str, delivery_id: str) -> bool: ...

    def set_waiting(self, issue_id: int, reason: str | None) -> None: ...

    def clear_waiting(self, repo: str, keep: Collection[int]) -> None: ...

    def list_runs(self, flt: RunFilter | None = None) -> list[Run]: ...

    def children(self, run_id: int) -> list[Run]: ...

    def add_escalation(
        self, repo: str, reason: str, detail: str, run_id: int | None = None, *, once: str = ""
    ) -> int | None: ...


class ApiStore(Protocol):
    """The HTTP API and dashboard: read the history, and the few operator writes."""

    def ping(self) -> bool: ...

    def stats(self) -> Stats: ...

    def list_runs(self, flt: RunFilter | None = None) -> list[Run]: ...

    def count_runs(self, flt: RunFilter | None = None) -> int: ...

    def get_run(self, run_id: int) -> Run | None: ...

    def run_events(
        self, run_id: int, after_id: int = 0, limit: int | None = None
    ) -> list[RunEvent]: ...

    def events_since(self, after_id: int, limit: int = 500) -> list[RunEvent]: ...

    def last_event_id(self) -> int: ...

    def list_repos(self) -> list[Repo]: ...

    def get_repo(self, name: str) -> Repo | None: ...

    def find_issue(self, repo: str, number: int) -> Issue | None: ...

    def duration_histograms(self, bounds: Sequence[float]) -> dict[str, Histogram]: ...

    def spend_by_repo(self) -> list[RepoSpend]: ...

    def spend_since(self, since: datetime) -> dict[str, float]: ...

    def escalation_counts(self) -> dict[tuple[str, str], int]: ...

    def hold_metrics_lead(self) -> bool: ...

    def waiting_issues(self, repo: str | None = None) -> list[WaitingIssue]: ...

    def notification_counts(self) -> NotificationCounts: ...

    def children(self, run_id: int) -> list[Run]: ...

    def enqueue(self, repo: str, options: EnqueueOptions | None = None) -> EnqueueResult: ...

    def cancel_run(self, run_id: int, by: str) -> Run: ...

    def retry_run(self, run_id: int, by: str) -> EnqueueResult: ...

    def freeze_repo(
        self,
        name: str,
        reason: str,
        by: str,
        run_id: int | None = None,
        *,
        escalation: str | None = None,
    ) -> bool: ...

    def unfreeze_repo(self, name: str, note: str, by: str) -> bool: ...

    def open_escalations(self, *, include_acknowledged: bool = False) -> list[Escalation]: ...

    def acknowledge_escalations(self, ids: Sequence[int], by: str) -> list[Escalation]: ...


class HistoryKeeperStore(Protocol):
    """Retention and audits: prune old history in batches, export a time window."""

    def prune_history(
        self,
        policy: RetentionPolicy,
        *,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> PruneReport: ...

    def export_runs(self, since: datetime, until: datetime | None = None) -> Iterator[Run]: ...

    def run_events(
        self, run_id: int, after_id: int = 0, limit: int | None = None
    ) -> list[RunEvent]: ...
