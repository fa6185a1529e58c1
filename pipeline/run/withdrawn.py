"""A run whose issue a human withdrew ends cancelled, before its agent starts or its push.

A human withdraws an issue by closing it, or (for a run queued for the ready label) by
taking that label off before the daemon swapped it for ``agent-working``
(``Lifecycle.withdrawal`` decides). The run asks three times:

- as it starts, on the issue it reads anyway for the prompt, before the daemon touches
  the issue's labels: a run queued behind another never starts its agent;
- while it implements, every tracker poll interval, on a thread of its own: the agent
  (or its tests) is stopped as a cancel stops it;
- just before the push, on a fresh read: nothing is pushed for a closed issue.

A read that fails during implementing is simply tried again at the next interval; one
that fails before the push is recorded and the push goes on, as it did before this check
existed: a tracker outage must not lose a finished change. The run ends as a cancel does
(``IssueWithdrawn`` is a ``CancelRequested``): worktree released, its branch kept, the
issue told once why.
"""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from types import TracebackType

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError, IssueWithdrawn, LeaseLost, PipelineError
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken
from pipeline.intake.lifecycle import Lifecycle
from pipeline.trackers.base import TrackerIssue

log = logging.getLogger(__name__)

STARTING = "before the agent started"
IMPLEMENTING = "while the agent was working"
PUSHING = "before the push"


@dataclass
class IssueGuard:
    """Asks the tracker whether the run's issue is still wanted; ends the run if not."""

    lifecycle: Lifecycle
    where: tuple[RepoSettings, int]  # the repo and the issue's number
    by_label: bool  # queued for the ready label: its removal withdraws the issue
    events: EventSink
    interval_s: float  # how often the issue is read while the run implements
    withdrawn: str | None = field(default=None, init=False)  # seen by the watching thread

    @property
    def repo(self) -> RepoSettings:
        return self.where[0]

    @property
    def number(self) -> int:
        return self.where[1]

    def read(self) -> TrackerIssue:
        return self.lifecycle.trackers[self.repo.tracker].get_issue(self.repo.slug, self.number)

    def withdrawal(self, issue: TrackerIssue) -> str | None:
        return self.lifecycle.withdrawal(self.repo, issue, by_label=self.by_label)

    def check(self, issue: TrackerIssue, when: str) -> None:
        """Raise ``IssueWithdrawn`` if ``issue`` (as just read) was withdrawn."""
        why = self.withdrawal(issue)
        if why is not None:
            self._end(f"{why} {when}")

    def before_push(self) -> None:
        """Read the issue again; a deleted issue is withdrawn, any other read error is
        recorded and the push goes on."""
        try:
            issue = self.read()
        except PipelineError as exc:
            if isinstance(exc, FatalError) and exc.kind == "missing_issue":
                self._end(f"issue #{self.number} was deleted {PUSHING}")
            self.events(
                "tracker",
                f"could not read issue #{self.number} again {PUSHING} ({exc}); pushing as if "
                "it were still wanted",
                {"error": str(exc)},
            )
            return
        self.check(issue, PUSHING)

    def _end(self, why: str) -> None:
        self.events("withdrawn", f"{why}: the run ends cancelled, nothing pushed", {"why": why})
        raise IssueWithdrawn(f"cancelled: {why}")


class IssueWatch:
    """Reads the issue on a thread while the run implements; stops the run if withdrawn.

    The thread only reads and sets the run's stop (as the heartbeat does for a cancel);
    the run's own thread records why and raises, as the ``with`` block ends.
    """

    def __init__(self, guard: IssueGuard, stop: StopToken) -> None:
        self.guard, self.stop = guard, stop
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name=f"issue-watch-{guard.number}", daemon=True
        )

    def __enter__(self) -> IssueWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()
        why = self.guard.withdrawn
        if why is not None and not isinstance(exc, LeaseLost):
            try:
                self.guard._end(f"{why} {IMPLEMENTING}")
            except IssueWithdrawn as withdrawn:
                raise withdrawn from exc

    def _watch(self) -> None:
        while not self._done.wait(self.guard.interval_s) and not self.stop.stopped:
            try:
                issue = self.guard.read()
            except Exception as exc:  # the next interval reads again; the push reads anyway
                log.info("issue #%s not read again: %s", self.guard.number, exc)
                continue
            why = self.guard.withdrawal(issue)
            if why is not None:
                self.guard.withdrawn = why
                self.stop.stop("cancelled")
                return


def watching(guard: IssueGuard | None, stop: StopToken) -> AbstractContextManager[object]:
    """While implementing, the issue is read every ``guard.interval_s`` (nothing without one)."""
    return nullcontext() if guard is None else IssueWatch(guard, stop)
