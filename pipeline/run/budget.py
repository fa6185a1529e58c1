"""What agents cost, recorded and held to budgets in one place.

``SpendLedger`` is one run's: every agent invocation (implement, fix
attempts, conflict resolution) is added as it ends, the run's totals are
recorded on the run at once (so the spend of a run that escalates or is
retried stays visible), and the repo's ``max_budget_usd`` is enforced on this
attempt's spend. ``DailyBudget`` is the repo's: past ``daily_budget_usd`` the
repo starts no new runs today, and one escalation says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pipeline.agents.base import AgentResult
from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import EscalationError
from pipeline.notify.escalation import Notifies
from pipeline.store import Store

log = logging.getLogger(__name__)

DAILY_CACHE_S = 5.0


@dataclass
class Spend:
    """Totals of agent use: dollars, tokens and turns."""

    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    turns: int = 0

    def add(self, result: AgentResult) -> None:
        self.cost_usd += result.cost_usd
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.turns += result.num_turns


class SpendLedger:
    """One run's spend: the run's totals (all attempts) and this attempt's, against its budget."""

    def __init__(
        self,
        repo: RepoSettings,
        total: Spend | None = None,
        record: Callable[[Mapping[str, object]], None] | None = None,
    ) -> None:
        self.repo = repo
        self.total = total or Spend()
        self.attempt = Spend()
        self.record = record

    def remaining(self) -> float | None:
        """Dollars this attempt may still spend; None without a budget."""
        if self.repo.max_budget_usd is None:
            return None
        return self.repo.max_budget_usd - self.attempt.cost_usd

    def add(self, result: AgentResult) -> None:
        """Count one invocation and record the run's new totals."""
        self.total.add(result)
        self.attempt.add(result)
        if self.record is None:
            return
        fields: dict[str, object] = {
            "num_turns": self.total.turns,
            "cost_usd": self.total.cost_usd,
            "tokens_in": self.total.tokens_in,
            "tokens_out": self.total.tokens_out,
        }
        if result.session_id:
            fields["agent_session"] = result.session_id
        self.record(fields)

    def check(self, *, spent: bool = False) -> None:
        """Escalate ``budget`` when this attempt went over (or, with ``spent``, reached) it."""
        budget = self.repo.max_budget_usd
        cost = self.attempt.cost_usd
        if budget is not None and (cost > budget or (spent and cost >= budget)):
            raise EscalationError(
                "budget",
                f"the run spent ${cost:.4f} of its ${budget:.4f} budget "
                f"(repos.{self.repo.name}.max_budget_usd)",
            )


class DailyBudget:
    """Repos over their daily budget start no new runs today; one escalation says so."""

    def __init__(self, settings: Settings, store: Store, notifier: Notifies) -> None:
        self.settings = settings
        self.store = store
        self.notifier = notifier
        self._cached: tuple[float, frozenset[int]] = (0.0, frozenset())

    def over_budget(self) -> Collection[int]:
        """Ids of the repos that reached their daily budget (cached a few seconds)."""
        stamp, ids = self._cached
        if time.monotonic() - stamp < DAILY_CACHE_S:
            return ids
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        over: set[int] = set()
        for repo in self.settings.repos:
            if repo.daily_budget_usd is None:
                continue
            record = self.store.get_repo(repo.name)
            if record is None:
                continue
            spent = self.store.repo_cost_since(record.id, midnight.replace(tzinfo=None))
            if spent >= repo.daily_budget_usd:
                over.add(record.id)
                self._escalate_once(repo, spent, midnight)
        self._cached = (time.monotonic(), frozenset(over))
        return self._cached[1]

    def _escalate_once(self, repo: RepoSettings, spent: float, day: datetime) -> None:
        """One escalation row and one notification per repo and day, even across a crash:
        the notification is keyed (queued once), and the row's key is written with the row,
        last, so a crash before it only means the next check tries both again."""
        key = f"budget:{repo.name}:{day.date().isoformat()}"
        if self.store.has_side_effect(key):
            return
        detail = (
            f"{repo.name} spent ${spent:.2f} today, over its daily budget of "
            f"${repo.daily_budget_usd:.2f}; no new runs start until tomorrow (UTC). "
            "Raise daily_budget_usd in the config to resume sooner."
        )
        self.notifier.notify(
            f"{repo.name}: daily budget reached",
            detail,
            kind="escalation",
            events=lambda *a, **k: None,
            key=f"notify:{key}",
        )
        if self.store.add_escalation(repo.name, "daily_budget", detail, once=key) is not None:
            log.warning("repo %s over its daily budget: %s", repo.name, detail)
