"""Each repo's spend today against its daily budget, as the repos page shows it.

Spend is measured as the daily budget itself measures it (``pipeline.run.budget``:
the cost of the repo's runs updated since midnight UTC), so "over" here is the
moment the daemon stops starting the repo's runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pipeline.config.settings import RepoSettings

# From this share of the budget on, a repo is marked as near it.
NEAR_SHARE = 0.8


@dataclass(frozen=True)
class BudgetLine:
    """One repo's day: ``status`` is ``none`` (no budget), ``ok``, ``near`` or ``over``."""

    spent_usd: float
    budget_usd: float | None
    status: str

    @property
    def text(self) -> str:
        if self.budget_usd is None:
            return f"${self.spent_usd:.2f} today, no budget"
        return f"${self.spent_usd:.2f} of ${self.budget_usd:.2f}"


def budget_line(spent_usd: float, budget_usd: float | None) -> BudgetLine:
    if budget_usd is None:
        return BudgetLine(spent_usd, None, "none")
    if spent_usd >= budget_usd:  # the daemon's own test: reaching it stops new runs
        return BudgetLine(spent_usd, budget_usd, "over")
    status = "near" if spent_usd >= NEAR_SHARE * budget_usd else "ok"
    return BudgetLine(spent_usd, budget_usd, status)


def budget_lines(
    names: Iterable[str], configured: Iterable[RepoSettings], spent: Mapping[str, float]
) -> dict[str, BudgetLine]:
    """Every named repo's line: its configured daily budget (if any) and today's spend."""
    budgets = {repo.name: repo.daily_budget_usd for repo in configured}
    return {name: budget_line(spent.get(name, 0.0), budgets.get(name)) for name in names}


def midnight_utc(now: datetime) -> datetime:
    """The start of ``now``'s day (naive UTC in, naive UTC out)."""
    return now.replace(hour=0, minute=0, second=0, microsecond=0)
