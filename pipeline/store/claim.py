"""Claiming runs and sweeping expired leases: the queue's guarantees in SQL.

Claim picks the highest-priority, then oldest, queued run whose ``run_after``
has come, of a repo that is not frozen and has no busy run, and whose parent
(if any: a fix-forward's broken run) has ended, while fewer than
``max_concurrency`` runs are busy in total.

- SQLite (one writer per host): a cheap read first, so an idle daemon takes
  no write lock; then the write transaction starts with ``BEGIN IMMEDIATE`` and
  one ``UPDATE ... WHERE id = (SELECT ...) RETURNING`` checks the cap and
  takes the run.
- PostgreSQL: one statement in its own transaction, no global lock; the cap is
  a set of slots held by busy runs (``pipeline.store.claim_pg``, ADR 0019).
  ``uq_runs_busy_repo`` and ``uq_runs_busy_slot`` back the rules: a unique
  violation means "nothing claimed this time".

The sweeper runs on every replica with no leader: each change is a
conditional UPDATE that re-checks the expired lease, so two sweepers (or a
late heartbeat) can never both win. It too reads before it writes. A run it
ends (cancelled, timed out, recoveries used up) freezes its repo in the same
transaction when the caller's ``freeze_policy`` says so.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, case, exists, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.store.base import StoreBase
from pipeline.store.claim_pg import claim_postgres
from pipeline.store.engine import db_now
from pipeline.store.models import BUSY_STATES, TERMINAL_STATES, IssueRow, RepoRow, RunRow
from pipeline.store.records import Run
from pipeline.store.repos import FreezePolicy, freeze_as_policy_says
from pipeline.store.runs import read_run

# A unique violation on PostgreSQL (a stale snapshot lost a race) is retried this often.
CLAIM_RETRIES = 3


@dataclass(frozen=True)
class SweepReport:
    recovered: list[int] = field(default_factory=list)  # expired lease -> retry_wait
    failed: list[int] = field(default_factory=list)  # expired lease, recoveries used up
    cancelled: list[int] = field(default_factory=list)  # expired lease, cancel was requested
    timed_out: list[int] = field(default_factory=list)  # expired lease past its deadline
    requeued: list[int] = field(default_factory=list)  # retry_wait -> queued

    @property
    def changed(self) -> int:
        return sum(
            map(len, (self.recovered, self.failed, self.cancelled, self.timed_out, self.requeued))
        )

    def __str__(self) -> str:
        """For the log: ``lease expired, to retry: run(s) 4; back in the queue: run(s) 4``."""
        parts = (
            ("lease expired, to retry", self.recovered),
            ("lease expired, recoveries used up: failed", self.failed),
            ("lease expired, cancel requested: cancelled", self.cancelled),
            ("lease expired past the deadline: timed out", self.timed_out),
            ("back in the queue", self.requeued),
        )
        told = [f"{what}: run(s) {', '.join(map(str, ids))}" for what, ids in parts if ids]
        return "; ".join(told) or "nothing changed"


# Built once: aliasing a table copies its column collection, which is slow per call.
_BUSY_IN_REPO = RunRow.__table__.alias("busy")
_BUSY_ALL = RunRow.__table__.alias("busy_all")
_PARENT = RunRow.__table__.alias("parent")


def _parent_ended() -> Any:
    """A run with a parent (a fix-forward) waits until that run has ended: killed
    between queuing its fix-forward and writing its own ending, a broken run is
    recovered into the queue beside it, and must watch and end first."""
    parent = _PARENT
    unsettled = select(parent.c.id).where(
        parent.c.id == RunRow.parent_id, parent.c.state.not_in(TERMINAL_STATES)
    )
    return ~exists(unsettled)


def _candidates(now: datetime, exclude_repo_ids: Collection[int]) -> Any:
    busy = _BUSY_IN_REPO
    query = (
        select(RunRow.id)
        .join(RepoRow, RepoRow.id == RunRow.repo_id)
        .where(
            RunRow.state == "queued",
            RunRow.run_after <= now,
            RepoRow.state != "frozen",
            # Uncorrelated on purpose: planned once as a hashed set, whatever the statistics.
            RunRow.repo_id.not_in(select(busy.c.repo_id).where(busy.c.state.in_(BUSY_STATES))),
            _parent_ended(),
        )
        .order_by(RunRow.priority.desc(), RunRow.id)
        .limit(1)
    )
    if exclude_repo_ids:
        query = query.where(RunRow.repo_id.not_in(list(exclude_repo_ids)))
    return query


def _busy_count() -> Any:
    busy = _BUSY_ALL
    return select(func.count(busy.c.id)).where(busy.c.state.in_(BUSY_STATES)).correlate(None)


def _anything_queued(conn: Connection, now: datetime) -> bool:
    query = select(RunRow.id).where(RunRow.state == "queued", RunRow.run_after <= now).limit(1)
    return conn.execute(query).first() is not None


def _anything_to_sweep(conn: Connection, now: datetime) -> bool:
    due = or_(
        (RunRow.state.in_(BUSY_STATES)) & (RunRow.lease_until < now),
        (RunRow.state == "retry_wait") & (RunRow.run_after <= now),
    )
    return bool(conn.execute(select(exists().where(due))).scalar())


def _next_due(conn: Connection) -> datetime | None:
    """The earliest moment the queue needs a look: a queued run's or a retry's
    ``run_after``, or a busy run's lease end (a dead owner's run is recovered then)."""
    waiting = RunRow.state.in_(("queued", "retry_wait"))
    busy = RunRow.state.in_(BUSY_STATES) & RunRow.lease_until.is_not(None)
    when = case((waiting, RunRow.run_after), else_=RunRow.lease_until)
    value = conn.execute(select(func.min(when)).where(or_(waiting, busy))).scalar()
    return value if isinstance(value, datetime) else None


def _recovery(row: Any, now: datetime, max_recoveries: int) -> tuple[dict[str, Any], str]:
    """What an expired lease becomes, and the SweepReport list it is counted in."""
    _, owner, _, cancel, deadline, recoveries = row
    ended = {"owner": None, "lease_until": None, "finished_at": now, "updated_at": now}
    if cancel:
        why = f"cancelled; its worker {owner} stopped renewing the lease"
        return {**ended, "state": "cancelled", "error_class": "cancelled", "error": why}, (
            "cancelled"
        )
    if deadline is not None and deadline <= now:
        why = f"timed out; its worker {owner} stopped renewing the lease"
        return {**ended, "state": "failed", "error_class": "timeout", "error": why}, "timed_out"
    if recoveries >= max_recoveries:
        why = (
            f"worker {owner} lost the run {recoveries + 1} times (max_recoveries={max_recoveries})"
        )
        return {**ended, "state": "failed", "error_class": "lease_expired", "error": why}, "failed"
    retry = {
        "state": "retry_wait",
        "owner": None,
        "lease_until": None,
        "deadline_at": None,
        "run_after": now,
        "recoveries": recoveries + 1,
        "updated_at": now,
    }
    return retry, "recovered"


def _claim_values(owner: str, now: datetime, lease_s: float) -> dict[str, Any]:
    return {
        "state": "preparing",
        "owner": owner,
        "attempt": RunRow.attempt + 1,
        "lease_until": now + timedelta(seconds=lease_s),
        "started_at": now,
        "finished_at": None,
        "deadline_at": None,
        "updated_at": now,
    }


class ClaimMixin(StoreBase):
    """``claim_next`` and ``sweep``."""

    def claim_next(
        self,
        owner: str,
        *,
        max_concurrency: int,
        lease_s: float,
        exclude_repo_ids: Collection[int] = (),
    ) -> Run | None:
        """Take the next claimable run for ``owner``, or None when nothing may start now."""
        if self.dialect == "postgresql":
            return self._claim_postgres(owner, max_concurrency, lease_s, exclude_repo_ids)
        with self._read() as conn:
            if not _anything_queued(conn, db_now(conn)):
                return None  # nothing to take: no write lock for an idle daemon
        try:
            with self._write() as conn:
                now = db_now(conn)
                taken = self._claim_sqlite(
                    conn, owner, now, max_concurrency, lease_s, exclude_repo_ids
                )
                if taken is None:
                    return None
                run_id, attempt = taken
                self._append_event(
                    conn,
                    (run_id, attempt),
                    "claimed",
                    f"claimed by {owner} (attempt {attempt})",
                    {"owner": owner, "attempt": attempt},
                    now,
                )
                return read_run(conn, run_id)
        except IntegrityError:
            return None  # uq_runs_busy_repo: another claimer took this repo first

    def _claim_postgres(
        self, owner: str, cap: int, lease_s: float, exclude: Collection[int]
    ) -> Run | None:
        for _ in range(CLAIM_RETRIES):
            try:
                with self.engine.connect() as conn:
                    conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                    return claim_postgres(conn, owner, cap, lease_s, exclude)
            except IntegrityError:
                continue  # a claim committed after our snapshot took that repo or slot
        return None

    @staticmethod
    def _claim_sqlite(
        conn: Connection,
        owner: str,
        now: datetime,
        cap: int,
        lease_s: float,
        exclude: Collection[int],
    ) -> tuple[int, int] | None:
        pick = _candidates(now, exclude).where(_busy_count().scalar_subquery() < cap)
        claimed = conn.execute(
            update(RunRow)
            .where(RunRow.id == pick.correlate(None).scalar_subquery(), RunRow.state == "queued")
            .values(**_claim_values(owner, now, lease_s))
            .returning(RunRow.id, RunRow.attempt, RunRow.timeout_s)
        ).first()
        if claimed is None:
            return None
        run_id, attempt, timeout_s = claimed
        if timeout_s is not None:  # execution time only: the deadline starts at the claim
            conn.execute(
                update(RunRow)
                .where(RunRow.id == run_id)
                .values(deadline_at=now + timedelta(seconds=float(timeout_s)))
            )
        return int(run_id), int(attempt)

    def next_due_s(self) -> float | None:
        """Seconds until the queue needs a look (0 when a queued run's time has come),
        or None when nothing is queued, waiting for a retry or busy. A read."""
        with self._read() as conn:
            due = _next_due(conn)
            if due is None:
                return None
            return max(0.0, (due - db_now(conn)).total_seconds())

    def sweep(
        self, *, max_recoveries: int, freeze_policy: FreezePolicy | None = None
    ) -> SweepReport:
        """Recover expired leases and requeue runs whose retry time has come."""
        report = SweepReport()
        with self._read() as conn:
            if not _anything_to_sweep(conn, db_now(conn)):
                return report  # nothing expired or due: no write lock
        with self._write() as conn:
            now = db_now(conn)
            expired = conn.execute(
                select(
                    RunRow.id,
                    RunRow.owner,
                    RunRow.attempt,
                    RunRow.cancel_requested,
                    RunRow.deadline_at,
                    RunRow.recoveries,
                )
                .where(RunRow.state.in_(BUSY_STATES), RunRow.lease_until < now)
                .order_by(RunRow.id)
            ).all()
            for row in expired:
                self._recover(conn, row, (now, max_recoveries), report, freeze_policy)
            self._requeue(conn, now, report)
        return report

    def _recover(
        self,
        conn: Connection,
        row: Any,
        when: tuple[datetime, int],
        report: SweepReport,
        freeze_policy: FreezePolicy | None,
    ) -> None:
        """One expired lease, ``when`` = (now, max_recoveries)."""
        (run_id, owner, attempt), (now, max_recoveries) = row[:3], when
        values, bucket_name = _recovery(row, now, max_recoveries)
        changed = conn.execute(
            update(RunRow)
            .where(
                RunRow.id == run_id,
                RunRow.owner == owner,
                RunRow.attempt == attempt,
                RunRow.state.in_(BUSY_STATES),
                RunRow.lease_until < now,
            )
            .values(**values)
        ).rowcount
        if changed != 1:
            return
        getattr(report, bucket_name).append(int(run_id))
        message = f"lease of {owner} expired: {values['state']}"
        data = {"state": values["state"], "owner": owner, "sweep": True}
        self._append_event(conn, (run_id, attempt), "state", message, data, now)
        freeze_as_policy_says(conn, read_run(conn, run_id), freeze_policy, now)

    def _requeue(self, conn: Connection, now: datetime, report: SweepReport) -> None:
        rows = conn.execute(
            update(RunRow)
            .where(RunRow.state == "retry_wait", RunRow.run_after <= now)
            .values(state="queued", updated_at=now)
            .returning(RunRow.id, RunRow.attempt)
        ).all()
        for run_id, attempt in sorted(rows):
            report.requeued.append(int(run_id))
            self._append_event(
                conn,
                (run_id, attempt),
                "state",
                "back in the queue",
                {"state": "queued", "sweep": True},
                now,
            )

    def busy_by_repo(self) -> dict[int, int]:
        """Busy runs per repo id, read in one snapshot (invariant monitors, metrics)."""
        with self._read() as conn:
            rows = conn.execute(
                select(RunRow.repo_id, func.count(RunRow.id))
                .where(RunRow.state.in_(BUSY_STATES))
                .group_by(RunRow.repo_id)
            )
            return {int(repo_id): int(count) for repo_id, count in rows}

    def issues_in_queue(self) -> set[tuple[str, int]]:
        """(repo name, issue number) of every issue with a run not yet ended, in one read."""
        with self._read() as conn:
            rows = conn.execute(
                select(RepoRow.name, IssueRow.number)
                .join(RunRow, RunRow.repo_id == RepoRow.id)
                .join(IssueRow, IssueRow.id == RunRow.issue_id)
                .where(RunRow.state.not_in(TERMINAL_STATES))
            )
            return {(str(name), int(number)) for name, number in rows}

    def claimed_by(self, owner: str) -> list[int]:
        """Ids of busy runs held by ``owner`` (diagnostics and tests)."""
        with self._read() as conn:
            rows = conn.execute(
                select(RunRow.id).where(RunRow.owner == owner, RunRow.state.in_(BUSY_STATES))
            )
            return [int(r[0]) for r in rows]
