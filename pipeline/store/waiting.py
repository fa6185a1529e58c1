"""Ready issues that wait, and why: held back by intake (an open dependency, a cycle), or
queued in a frozen repo (``frozen_waits``, told on the issue by ``pipeline.intake.frozen``)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update

from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.models import IssueRow, RepoRow, RunRow, SideEffectRow


@dataclass(frozen=True)
class WaitingIssue:
    """An issue labelled ready that is not queued yet, with the reason a user reads."""

    repo: str
    number: int
    title: str
    url: str
    reason: str
    since: datetime | None


@dataclass(frozen=True)
class FrozenWait:
    """A queued run of an issue whose repo is frozen: what froze it, when, by whom, why."""

    run_id: int
    repo: str
    number: int
    frozen_run_id: int | None  # None: a person froze the repo
    frozen_at: datetime
    frozen_by: str
    reason: str


class WaitingMixin(StoreBase):
    """Domain verbs for issues that wait for their dependencies."""

    def set_waiting(self, issue_id: int, reason: str | None) -> None:
        """Record why the issue waits (``None``: it no longer does); keeps the first ``since``."""
        with self._write() as conn:
            since = db_now(conn) if reason is not None else None
            conn.execute(
                update(IssueRow)
                .where(IssueRow.id == issue_id)
                .values(
                    waiting_reason=reason,
                    waiting_since=func.coalesce(IssueRow.waiting_since, since) if reason else None,
                )
            )

    def clear_waiting(self, repo: str, keep: Collection[int]) -> None:
        """Forget the waiting of ``repo``'s issues other than ``keep`` (unlabelled, closed)."""
        with self._write() as conn:
            repo_id = self._repo_id(conn, repo)
            where = [IssueRow.repo_id == repo_id, IssueRow.waiting_reason.is_not(None)]
            if keep:
                where.append(IssueRow.number.not_in(list(keep)))
            conn.execute(
                update(IssueRow).where(*where).values(waiting_reason=None, waiting_since=None)
            )

    def waiting_issues(self, repo: str | None = None) -> list[WaitingIssue]:
        """Every waiting issue (of ``repo``), by repo and number."""
        query = (
            select(RepoRow.name, IssueRow.number, IssueRow.title, IssueRow.url)
            .add_columns(IssueRow.waiting_reason, IssueRow.waiting_since)
            .join(RepoRow, RepoRow.id == IssueRow.repo_id)
            .where(IssueRow.waiting_reason.is_not(None))
            .order_by(RepoRow.name, IssueRow.number)
        )
        if repo is not None:
            query = query.where(RepoRow.name == repo)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [WaitingIssue(r[0], r[1], r[2] or "", r[3] or "", r[4] or "", r[5]) for r in rows]

    def frozen_waits(self) -> list[FrozenWait]:
        """Every queued run of an issue in a frozen repo, oldest first (one read)."""
        query = (
            select(RunRow.id, RepoRow.name, IssueRow.number, RepoRow.frozen_run_id)
            .add_columns(RepoRow.frozen_at, RepoRow.frozen_by, RepoRow.frozen_reason)
            .join(RepoRow, RepoRow.id == RunRow.repo_id)
            .join(IssueRow, IssueRow.id == RunRow.issue_id)
            .where(RunRow.state == "queued", RepoRow.state == "frozen")
            .order_by(RunRow.id)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            FrozenWait(r[0], r[1], r[2], r[3], r[4] or datetime.min, r[5] or "", r[6] or "")
            for r in rows
        ]

    def settled_effects(self, keys: Collection[str]) -> set[str]:
        """Which of ``keys`` are done side effects (a reservation still pending is not)."""
        if not keys:
            return set()
        query = select(SideEffectRow.key).where(
            SideEffectRow.key.in_(list(keys)), SideEffectRow.settled_at.is_not(None)
        )
        with self._read() as conn:
            return {row[0] for row in conn.execute(query)}
