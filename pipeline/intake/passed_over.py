"""Listed issues a poll could not decide on: each waits on its own, the rest go on.

What fails while one listed issue is considered (its label events, the labeller's
permission, its comments) is that issue's alone when the forge answered: a 4xx
(``FatalError``: the issue deleted, the call refused) or an answer not shaped as
the forge documents (``RetryableError("forge_bad_response")``: JSON cut short, an
array where an object belongs, a history longer than the clients' page cap, which
anyone who may edit the issue can grow). Such an issue is passed over with a
warning naming it and why, and read again on the next poll even if the list is
unchanged; failing again, it waits twice as long each time, up to
``MAX_POLL_BACKOFF_S``, so an issue that costs a hundred pages on every poll cannot
spend the tracker's rate limit for the others.

What says the tracker itself is unwell still ends the tracker's cycle and backs the
tracker off (``Intake._poll_failed``): no answer (``network``: refused, timed out), a
5xx, a rate limit, and a full queue; so does everything about the ready list itself
(refusals there are ``pipeline.intake.access``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError, RetryableError
from pipeline.intake.access import MAX_POLL_BACKOFF_S
from pipeline.trackers.base import TrackerIssue

log = logging.getLogger(__name__)


def issue_scoped(exc: Exception) -> bool:
    """Whether ``exc``, raised while one listed issue was considered, is that issue's alone."""
    if isinstance(exc, FatalError):
        return True
    return isinstance(exc, RetryableError) and exc.kind == "forge_bad_response"


@dataclass
class Passed:
    """One issue passed over: as listed, how often in a row, when to read it again."""

    issue: TrackerIssue
    failures: int
    not_before: float


class PassedOver:
    """The issues passed over, per repo, with their own back-off."""

    def __init__(self, interval_s: Callable[[str], float], clock: Callable[[], float]) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._passed: dict[str, dict[int, Passed]] = {}

    def failed(self, repo: RepoSettings, issue: TrackerIssue, exc: Exception) -> None:
        """Record that ``issue`` could not be considered; read again next poll, then less often."""
        passed = self._passed.setdefault(repo.name, {})
        failures = passed[issue.number].failures + 1 if issue.number in passed else 1
        wait = 0.0
        if failures > 1:
            wait = min(MAX_POLL_BACKOFF_S, self.interval_s(repo.tracker) * 2 ** (failures - 2))
        passed[issue.number] = Passed(issue, failures, self.clock() + wait)
        log.warning(
            "%s#%s (%s): not considered, the rest of the poll goes on; read again %s: %s",
            repo.name,
            issue.number,
            repo.slug,
            "on the next poll" if wait == 0 else f"in {wait:.0f}s",
            exc,
        )

    def due(self, repo: RepoSettings, number: int) -> bool:
        """False while issue ``number`` waits out its back-off."""
        passed = self._passed.get(repo.name, {}).get(number)
        return passed is None or self.clock() >= passed.not_before

    def done(self, repo: RepoSettings, number: int) -> None:
        """Issue ``number`` was considered: it is passed over no more."""
        self._passed.get(repo.name, {}).pop(number, None)

    def pending(self, repo: RepoSettings) -> dict[int, TrackerIssue]:
        """The issues of ``repo`` due to be read again, by number."""
        passed = self._passed.get(repo.name, {})
        return {n: p.issue for n, p in passed.items() if self.clock() >= p.not_before}

    def forget(self, repo: RepoSettings, listed: set[int]) -> None:
        """Issues no longer listed as ready are not read again."""
        passed = self._passed.get(repo.name, {})
        for number in [n for n in passed if n not in listed]:
            del passed[number]
