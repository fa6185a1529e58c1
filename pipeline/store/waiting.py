"""Ready issues that intake holds back, and why (an open dependency, a cycle)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update

from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.models import IssueRow, RepoRow


@dataclass(frozen=True)
class WaitingIssue:
    """An issue labelled ready that is not queued yet, with the reason a user reads."""

    repo: str
    number: int
    title: str
    url: str
    reason: str
    since: datetime | None


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
