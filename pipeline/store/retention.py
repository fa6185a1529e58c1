"""History retention: prune old runs and events in small batches, and export history.

A run is pruned whole (its events, notifications and row) once it ended more than
``keep_runs_days`` ago; a run that ended more than ``keep_events_days`` ago keeps
its row (outcome, SHAs, cost) and loses its timeline. Never pruned: runs that have
not ended, runs with an escalation, a repo's frozen run (its evidence), runs with a
notification still pending, and the ancestors of any run that stays (a fix-forward
names its parent). Each batch is its own short transaction, so a large prune never
holds SQLite's write lock or a PostgreSQL transaction for long; pruning again
right after removes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, delete, exists, func, not_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased

from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.history import run_from_row, runs_query
from pipeline.store.models import (
    TERMINAL_STATES,
    EscalationRow,
    NotificationRow,
    RepoRow,
    RunEventRow,
    RunRow,
)
from pipeline.store.records import Run

log = logging.getLogger(__name__)

RUN_BATCH = 100
EVENT_BATCH = 2000
EXPORT_PAGE = 500


@dataclass(frozen=True)
class RetentionPolicy:
    """How long history stays: timelines ``keep_events_days``, run rows ``keep_runs_days``."""

    keep_events_days: int
    keep_runs_days: int

    def __post_init__(self) -> None:
        if self.keep_events_days < 1 or self.keep_runs_days < 1:
            raise ValueError("keep_events_days and keep_runs_days must be at least 1")
        if self.keep_events_days > self.keep_runs_days:
            raise ValueError(
                f"keep_events_days ({self.keep_events_days}) must not exceed "
                f"keep_runs_days ({self.keep_runs_days}): a timeline needs its run"
            )


@dataclass(frozen=True)
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove)."""

    runs: int = 0
    events: int = 0
    notifications: int = 0
    dry_run: bool = False

    @property
    def removed_anything(self) -> bool:
        return bool(self.runs or self.events or self.notifications)


Progress = Callable[[PruneReport], None]


def _ended_before(cutoff: datetime) -> Any:
    """Runs that ended before ``cutoff`` and are no one's evidence."""
    frozen = select(RepoRow.frozen_run_id).where(RepoRow.frozen_run_id.is_not(None))
    return and_(
        RunRow.state.in_(TERMINAL_STATES),
        RunRow.finished_at.is_not(None),
        RunRow.finished_at < cutoff,
        not_(exists().where(EscalationRow.run_id == RunRow.id)),
        RunRow.id.not_in(frozen),
    )


def _run_prunable(cutoff: datetime) -> Any:
    """Runs whose row may go: ended long ago, no evidence, nothing left to deliver."""
    pending = exists().where(
        NotificationRow.run_id == RunRow.id, NotificationRow.state == "pending"
    )
    return and_(_ended_before(cutoff), not_(pending))


def _kept_ancestors(cutoff: datetime) -> Any:
    """Ids of every ancestor of a run that stays (a recursive walk up ``parent_id``)."""
    anchor = select(RunRow.parent_id.label("id")).where(
        RunRow.parent_id.is_not(None), not_(_run_prunable(cutoff))
    )
    walk = anchor.cte("kept_ancestors", recursive=True)
    parent = aliased(RunRow)
    walk = walk.union(
        select(parent.parent_id)
        .join(walk, parent.id == walk.c.id)
        .where(parent.parent_id.is_not(None))
    )
    return select(walk.c.id)


class RetentionMixin(StoreBase):
    """Domain verbs for keeping history bounded and for audits."""

    def prune_history(
        self,
        policy: RetentionPolicy,
        *,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> PruneReport:
        """Apply ``policy`` in batches; ``progress`` hears the running totals after each."""
        with self._read() as conn:
            now = db_now(conn)
        runs_cutoff = now - timedelta(days=policy.keep_runs_days)
        events_cutoff = now - timedelta(days=policy.keep_events_days)
        if dry_run:
            return self._count_prunable(runs_cutoff, events_cutoff)
        report = self._prune_runs(runs_cutoff, progress)
        return self._prune_events(events_cutoff, report, progress)

    def _count_prunable(self, runs_cutoff: datetime, events_cutoff: datetime) -> PruneReport:
        doomed = select(RunRow.id).where(
            _run_prunable(runs_cutoff), RunRow.id.not_in(_kept_ancestors(runs_cutoff))
        )
        events = (
            select(func.count(RunEventRow.id))
            .join(RunRow, RunRow.id == RunEventRow.run_id)
            .where(_ended_before(events_cutoff))
        )
        notes = select(func.count(NotificationRow.id)).where(NotificationRow.run_id.in_(doomed))
        with self._read() as conn:
            runs = conn.execute(select(func.count()).select_from(doomed.subquery())).scalar_one()
            return PruneReport(
                runs=int(runs),
                events=int(conn.execute(events).scalar_one()),
                notifications=int(conn.execute(notes).scalar_one()),
                dry_run=True,
            )

    def _prune_runs(self, cutoff: datetime, progress: Progress | None) -> PruneReport:
        """Whole runs, newest first, so a fix-forward goes before the parent it names.

        Candidates are read without a lock; each write transaction then deletes at
        most ``EVENT_BATCH`` events, or the batch's rows once their events are gone,
        re-checking that each run may still go.
        """
        report = PruneReport()
        with self._read() as conn:
            kept = {int(i) for i in conn.execute(_kept_ancestors(cutoff)).scalars()}
        below: int | None = None
        while True:
            with self._read() as conn:
                fetched = _next_runs(conn, cutoff, below)
            if not fetched:
                return report
            below = fetched[-1]
            ids = [i for i in fetched if i not in kept]
            if ids:
                report = self._delete_runs(ids, cutoff, report, progress)

    def _delete_runs(
        self, ids: list[int], cutoff: datetime, report: PruneReport, progress: Progress | None
    ) -> PruneReport:
        while True:
            with self._write() as conn:
                still = select(RunRow.id).where(RunRow.id.in_(ids), _run_prunable(cutoff))
                events = (
                    select(RunEventRow.id)
                    .where(RunEventRow.run_id.in_(list(conn.execute(still).scalars())))
                    .limit(EVENT_BATCH)
                )
                gone = _delete_events(conn, list(conn.execute(events).scalars()))
            report = replace(report, events=report.events + gone)
            if not gone:
                break
            if progress is not None:
                progress(report)
        try:
            with self._write() as conn:
                doomed = select(RunRow.id).where(RunRow.id.in_(ids), _run_prunable(cutoff))
                doomed_ids = [int(i) for i in conn.execute(doomed).scalars()]
                report = _delete_rows(conn, doomed_ids, report)
        except IntegrityError:
            # A run created since the ancestors were read names one of these as its
            # parent: this batch stays (rolled back whole), the next prune sees it.
            log.warning("history: runs %s-%s gained a child while pruning; kept", ids[-1], ids[0])
        if progress is not None:
            progress(report)
        return report

    def _prune_events(
        self, cutoff: datetime, report: PruneReport, progress: Progress | None
    ) -> PruneReport:
        """The timelines of runs kept without them, oldest event first."""
        after = 0
        while True:
            query = (
                select(RunEventRow.id, RunEventRow.run_id)
                .join(RunRow, RunRow.id == RunEventRow.run_id)
                .where(RunEventRow.id > after, _ended_before(cutoff))
                .order_by(RunEventRow.id)
                .limit(EVENT_BATCH)
            )
            with self._read() as conn:
                rows = conn.execute(query).all()
            if not rows:
                return report
            with self._write() as conn:
                runs = {int(row.run_id) for row in rows}
                still = select(RunRow.id).where(RunRow.id.in_(runs), _ended_before(cutoff))
                kept = set(runs) - {int(i) for i in conn.execute(still).scalars()}
                gone = _delete_events(conn, [int(r.id) for r in rows if r.run_id not in kept])
            after = int(rows[-1].id)
            report = replace(report, events=report.events + gone)
            if progress is not None:
                progress(report)

    def export_runs(self, since: datetime, until: datetime | None = None) -> Iterator[Run]:
        """Runs created in ``[since, until)``, oldest first, a page at a time (constant memory)."""
        after = 0
        while True:
            query = runs_query().where(RunRow.id > after, RunRow.created_at >= since)
            if until is not None:
                query = query.where(RunRow.created_at < until)
            with self._read() as conn:
                page = [
                    run_from_row(r)
                    for r in conn.execute(query.order_by(RunRow.id).limit(EXPORT_PAGE))
                ]
            yield from page
            if len(page) < EXPORT_PAGE:
                return
            after = page[-1].id


def _next_runs(conn: Connection, cutoff: datetime, below: int | None) -> list[int]:
    query = select(RunRow.id).where(_run_prunable(cutoff))
    if below is not None:
        query = query.where(RunRow.id < below)
    return [
        int(i) for i in conn.execute(query.order_by(RunRow.id.desc()).limit(RUN_BATCH)).scalars()
    ]


def _delete_events(conn: Connection, ids: list[int]) -> int:
    if not ids:
        return 0
    return int(conn.execute(delete(RunEventRow).where(RunEventRow.id.in_(ids))).rowcount)


def _delete_rows(conn: Connection, ids: list[int], report: PruneReport) -> PruneReport:
    """The runs ``ids`` with their notifications and any event written since."""
    if not ids:
        return report
    notes = conn.execute(delete(NotificationRow).where(NotificationRow.run_id.in_(ids))).rowcount
    events = conn.execute(delete(RunEventRow).where(RunEventRow.run_id.in_(ids))).rowcount
    runs = conn.execute(delete(RunRow).where(RunRow.id.in_(ids))).rowcount
    return replace(
        report,
        runs=report.runs + int(runs),
        events=report.events + int(events),
        notifications=report.notifications + int(notes),
    )
