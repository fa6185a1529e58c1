"""Every ended run's progress comment shows how it ended, whatever stopped the daemon.

A run's final state is written by its comment's writer thread after the run
ended, paced behind the states not shown yet (``pipeline.run.progress``).
``ProgressFinals`` follows those writers:

- when the final state reaches the forge, it settles the side effect
  ``progress-final:run=N``;
- a daemon stopping gracefully has every writer still open write its final
  state at once (``finish``), skipping the states not shown yet, before it exits;
- a daemon killed before a writer was done leaves an ended run with a progress
  comment and no settled key: ``sweep`` (every ``sweep_interval_s``, so at the
  first pass after a restart) rebuilds that run's view from its timeline and
  writes its final state, once the run ended longer than a lease ago (a
  writer of another replica has had its time) and no writer of this process
  follows it.

Like the endings pass, the sweep looks back one hour from the daemon's start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from pipeline.config.settings import Settings
from pipeline.core.errors import FatalError
from pipeline.core.masking import mask
from pipeline.core.states import Outcome, RunState
from pipeline.run.progress import CommentSlot, ProgressComment, ProgressView, outcome_text
from pipeline.store import Run, Store
from pipeline.trackers.base import Tracker

log = logging.getLogger(__name__)

LOOKBACK = timedelta(hours=1)
SWEEP_LIMIT = 50
SETTLED_PREFIX = "progress-final:run="


def run_link(settings: Settings, run_id: int) -> str:
    """Where a progress comment sends its reader: the dashboard, else the CLI."""
    public = settings.http.public_url
    return f"{public.rstrip('/')}/runs/{run_id}" if public else f"`pipeline runs show {run_id}`"


def final_view(run: Run, store: Store, link: str) -> ProgressView:
    """The view a finished ``run``'s comment ends with, rebuilt from its timeline."""
    view = ProgressView(run.id, link)
    for event in store.run_events(run.id):
        view.apply(event.kind, event.message, event.data)
    view.apply("state", run.state, {"state": run.state, "pushed_sha": run.pushed_sha or ""})
    view.cost_usd = run.cost_usd
    outcome = Outcome(RunState(run.state), run.error_class, run.error, run.summary)
    view.state, view.ending = run.state, outcome_text(outcome)
    return view


class ProgressFinals:
    """Follows the final writes of this process's progress comments; settles the rest."""

    def __init__(self, settings: Settings, store: Store, trackers: Mapping[str, Tracker]) -> None:
        self.settings = settings
        self.store = store
        self.trackers = trackers
        self.stale_s = settings.scheduler.lease_s
        self.since = datetime.now(UTC).replace(tzinfo=None) - LOOKBACK
        self._open: dict[int, ProgressComment] = {}
        self._lock = threading.Lock()

    # -- this process's writers ------------------------------------------------------

    def follow(self, progress: ProgressComment) -> None:
        progress.finals = self

    def closing(self, progress: ProgressComment) -> None:
        with self._lock:
            self._open[progress.view.run_id] = progress

    def drained(self, progress: ProgressComment, *, final: bool) -> None:
        run_id = progress.view.run_id
        with self._lock:
            if self._open.get(run_id) is progress:
                del self._open[run_id]
        if final:
            self._settle(run_id)

    def finish(self, timeout_s: float) -> None:
        """A stopping daemon: every open writer writes its final state now; wait for them."""
        with self._lock:
            writers = list(self._open.values())
        for progress in writers:
            progress.hurry()
        deadline = time.monotonic() + timeout_s
        for progress in writers:
            progress.join(max(0.0, deadline - time.monotonic()))

    # -- after a crash ------------------------------------------------------------------

    def sweep(self) -> int:
        """Write the final state of ended runs whose writer never did; how many."""
        until = self.store.now() - timedelta(seconds=self.stale_s)
        done = 0
        for run in self.store.unsettled_progress(self.since, until, SETTLED_PREFIX, SWEEP_LIMIT):
            with self._lock:
                if run.id in self._open:
                    continue  # our own writer is on it
            try:
                self.repair(run)
                done += 1
            except Exception as exc:  # the forge may be down: the next pass retries
                log.warning("run %s: progress comment not brought to its end (%s)", run.id, exc)
        return done

    def repair(self, run: Run) -> None:
        """Edit ``run``'s progress comment to its final state, then settle it."""
        repo = self.settings.repo(run.repo_name)
        if repo is None or run.issue_number is None or run.progress_comment_id is None:
            self._settle(run.id)  # nowhere to write it
            return
        view = final_view(run, self.store, run_link(self.settings, run.id))
        slot = CommentSlot(
            self.trackers[repo.tracker],
            (repo.slug, run.issue_number),
            run.id,
            run.progress_comment_id,
            remember=lambda _comment_id: None,
        )
        try:
            slot.write(mask(view.render()))
        except FatalError as exc:
            if exc.kind != "missing_comment":
                raise
            log.info("run %s: its progress comment was deleted; left so", run.id)
        else:
            log.info("run %s: progress comment brought to its end (%s)", run.id, run.state)
        self._settle(run.id)

    def _settle(self, run_id: int) -> None:
        try:
            self.store.claim_side_effect(f"{SETTLED_PREFIX}{run_id}", run_id=run_id)
        except Exception as exc:  # unsettled, the sweep writes the same final state again
            log.warning("run %s: progress comment's end not recorded (%s)", run_id, exc)
