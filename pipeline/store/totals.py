"""Totals per repo for ``/metrics``: spend, execution time and escalations.

Each verb is one aggregate query however long the history is, so a scrape
costs the same on the first day and after years.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, extract, func, select

from pipeline.store.base import StoreBase
from pipeline.store.models import EscalationRow, RepoRow, RunRow


@dataclass(frozen=True)
class RepoSpend:
    """What a repo's runs cost so far, summed over every run in the history."""

    repo: str
    cost_usd: float
    tokens_in: int
    tokens_out: int


@dataclass(frozen=True)
class Histogram:
    """Finished runs' execution time: cumulative count per bound, count and sum in seconds."""

    cumulative: list[int]
    count: int
    sum_s: float


class TotalsMixin(StoreBase):
    """The aggregate reads behind the database-wide metrics."""

    def spend_by_repo(self) -> list[RepoSpend]:
        """Agent cost and tokens per repo (repos with no run yet included, at zero)."""
        query = (
            select(
                RepoRow.name,
                func.coalesce(func.sum(RunRow.cost_usd), 0.0),
                func.coalesce(func.sum(RunRow.tokens_in), 0),
                func.coalesce(func.sum(RunRow.tokens_out), 0),
            )
            .outerjoin(RunRow, RunRow.repo_id == RepoRow.id)
            .group_by(RepoRow.name)
            .order_by(RepoRow.name)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [RepoSpend(str(r[0]), float(r[1]), int(r[2]), int(r[3])) for r in rows]

    def spend_since(self, since: datetime) -> dict[str, float]:
        """Agent cost per repo of runs updated at or after ``since`` (every repo, zero if none).

        The same measure the daily budget holds repos to (``repo_cost_since``).
        """
        recent = and_(RunRow.repo_id == RepoRow.id, RunRow.updated_at >= since)
        query = (
            select(RepoRow.name, func.coalesce(func.sum(RunRow.cost_usd), 0.0))
            .outerjoin(RunRow, recent)
            .group_by(RepoRow.name)
        )
        with self._read() as conn:
            return {str(name): float(cost) for name, cost in conn.execute(query).all()}

    def duration_histograms(self, bounds: Sequence[float]) -> dict[str, Histogram]:
        """Execution time (queue wait excluded) of each repo's finished runs."""
        if self.dialect == "postgresql":
            seconds: Any = extract("epoch", RunRow.finished_at - RunRow.started_at)
        else:
            days = func.julianday(RunRow.finished_at) - func.julianday(RunRow.started_at)
            seconds = days * 86400.0
        columns = [func.coalesce(func.sum(case((seconds <= b, 1), else_=0)), 0) for b in bounds]
        query = (
            select(RepoRow.name, func.count(RunRow.id), func.coalesce(func.sum(seconds), 0.0))
            .add_columns(*columns)
            .join(RunRow, RunRow.repo_id == RepoRow.id)
            .where(RunRow.started_at.is_not(None), RunRow.finished_at.is_not(None))
            .group_by(RepoRow.name)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {str(r[0]): Histogram([int(v) for v in r[3:]], int(r[1]), float(r[2])) for r in rows}

    def escalation_counts(self) -> dict[tuple[str, str], int]:
        """Escalations ever raised, by (repo, reason)."""
        query = (
            select(RepoRow.name, EscalationRow.reason, func.count())
            .join(RepoRow, RepoRow.id == EscalationRow.repo_id)
            .group_by(RepoRow.name, EscalationRow.reason)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}
