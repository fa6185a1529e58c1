"""One ending policy for every terminal run, whoever ended it.

A run ends succeeded, failed, escalated, cancelled, timed out (``failed``
with the error class ``timeout``) or frozen (escalated with its repo
frozen). Whether the worker, the sweeper, a cancel or recovery wrote that
ending, ``Endings.announce`` then does the same four things once:

1. one log line an operator can grep (``run 12 ended failed ...``), at
   WARNING or ERROR when a human is needed;
2. the issue's labels: ``agent-working`` removed, ``agent-blocked`` added
   when a human is needed;
3. one comment (marked, so never posted twice) saying what happened, what was
   kept where, and the exact next command;
4. one notification with the same text (queued in the outbox with its key
   in one transaction, so a second replica, a repeated pass or a crash never
   sends it twice nor loses it).

An issue deleted since is told nothing (its timeline says so) and the
notification still goes out. A succeeded run's issue was
resolved by recovery, unless the forge failed just then: the pass carries out
the resolution it left on the run's timeline.

An unhealed fix-forward's freeze is written with its ending, in the same
transaction (the scheduler's ``freeze_policy``), so no claim sees its repo
open; ``settle`` (while the ended run still holds its slot) and ``announce``
freeze after the fact a repo whose fix-forward was ended another way. The
scheduler calls ``announce`` once the slot is free, so a forge that paces its
writes never delays the next claim; ``sweep`` runs
periodically and announces endings written elsewhere (the sweeper, a cancel
of a waiting run from the CLI, a replica that died mid-announcement).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.core.faults import checkpoint
from pipeline.core.states import (
    DEPLOY_BROKEN_CLASS,
    RESUMABLE_REASONS,
    SUPERSEDED_CLASS,
    TERMINAL_STATES,
    TIMEOUT_CLASS,
    RunState,
)
from pipeline.intake.lifecycle import CommentInFlight, Lifecycle
from pipeline.intake.sanitize import inert_quote
from pipeline.notify.escalation import (
    EndingText,
    Notifies,
    NotifyKind,
    ending_message,
    next_step,
)
from pipeline.run.recovery import PENDING_RESOLUTION, Recovery
from pipeline.run.resume import question_of
from pipeline.store import Run, Store

log = logging.getLogger(__name__)

# At start-up, endings this recent that were never announced are announced.
LOOKBACK = timedelta(hours=1)
SWEEP_LIMIT = 200
# The side effect that says a run's ending was told: this prefix and the run's id.
DONE_PREFIX = "ending:run="


class Endings:
    """Tells the log, the issue and the humans how each run ended, exactly once."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        lifecycle: Lifecycle,
        recovery: Recovery,
        notifier: Notifies,
    ) -> None:
        self.settings = settings
        self.store = store
        self.lifecycle = lifecycle
        self.recovery = recovery
        self.notifier = notifier
        self.since = datetime.now(UTC).replace(tzinfo=None) - LOOKBACK
        self._logged: set[int] = set()
        self._frozen: dict[str, bool] = {}
        self._lock = threading.Lock()

    # -- one run ------------------------------------------------------------------

    def settle(self, run: Run) -> None:
        """What must follow a terminal ``run`` before its slot takes another run: an
        unhealed fix-forward's repo is frozen (a no-op when its ending froze it already).
        ``announce`` then tells the humans."""
        self.recovery.freeze_unhealed(run)

    def announce(self, run: Run) -> None:
        """Apply the ending policy to a terminal ``run``; a no-op once done."""
        with self._lock:  # the worker's call and the periodic pass may meet here
            self._announce(run)

    def _announce(self, run: Run) -> None:
        if run.state not in TERMINAL_STATES or self.store.has_side_effect(_done_key(run)):
            return
        checkpoint("ended", run.id)
        repo = self.settings.repo(run.repo_name)
        if repo is None:
            log.warning(
                "run %s ended %s; repo %s is no longer configured, so the ending is not told",
                run.id,
                run.state,
                run.repo_name,
            )
            self.store.claim_side_effect(_done_key(run), run_id=run.id)  # said once, not per pass
            return
        self.recovery.freeze_unhealed(run)
        text = self.describe(run, repo)
        self._log(run, text)
        if text is not None:
            self._record_escalation(run, text)
            self._tell_issue(run, repo, text)
            self._notify(run, text)
        self.store.claim_side_effect(_done_key(run), run_id=run.id)

    def describe(self, run: Run, repo: RepoSettings) -> EndingText | None:
        """The facts of ``run``'s ending; None for a link in a fix-forward chain."""
        if run.state == RunState.FAILED and run.error_class == DEPLOY_BROKEN_CLASS:
            return None  # its fix-forward child carries the story on
        record = self.store.get_repo(repo.name)
        frozen = record is not None and record.frozen
        root = self.recovery.chain_root(run)
        return EndingText(
            repo=repo.name,
            run_id=run.id,
            headline=_headline(
                run, frozen and record is not None and record.frozen_run_id == run.id
            ),
            reason=_reason(run),
            what_happened=_what_happened(run),
            kept=self._kept(run),
            frozen=frozen and run.state != RunState.SUCCEEDED,
            retryable=_retryable(run),
            ready_label=self.lifecycle.ready_label(repo) if root.issue_number else None,
            issue_url=root.issue_url,
            sha=run.pushed_sha,
            question=question_of(run) if _answerable(run) and root.issue_number else None,
        )

    def _kept(self, run: Run) -> tuple[tuple[str, str], ...]:
        if run.state == RunState.SUCCEEDED:
            return ()
        kept = [
            ("worktree", str(e.data.get("path")))
            for e in self.store.run_events(run.id)
            if e.kind == "kept"
        ]
        if not kept and run.branch:
            kept.append(("branch", f"{run.branch} (in the repo's checkout)"))
        if run.pushed_sha:
            kept.append(("pushed commit", f"{run.pushed_sha} on {run.repo_name}"))
        return tuple(kept)

    def _log(self, run: Run, text: EndingText | None) -> None:
        if run.id in self._logged:
            return
        self._logged.add(run.id)
        if text is None:
            log.warning(
                "run %s ended failed (%s): %s", run.id, run.error_class, _first_line(run.error)
            )
            return
        level = logging.INFO
        if text.retryable and run.state != RunState.CANCELLED:
            level = logging.ERROR if text.frozen else logging.WARNING
        why = f" ({text.reason})" if text.reason else ""
        log.log(
            level,
            "run %s ended %s%s: repo %s: %s; next: %s",
            run.id,
            text.headline,
            why,
            text.repo,
            _first_line(text.what_happened),
            next_step(text),
        )

    def _record_escalation(self, run: Run, text: EndingText) -> None:
        """Failed runs get an escalation row too (escalated ones got theirs from recovery)."""
        if run.state != RunState.FAILED:
            return
        once = f"escalation:run={run.id}"  # the key and the row in one transaction
        self.store.add_escalation(
            text.repo, text.reason or "failed", text.what_happened, run.id, once=once
        )

    def _tell_issue(self, run: Run, repo: RepoSettings, text: EndingText) -> None:
        """The issue's labels and comment; an issue deleted since is told nothing, once."""
        root = self.recovery.chain_root(run)
        try:
            if run.state == RunState.SUCCEEDED:
                self._resolve_pending(run, repo)  # recovery resolved it, unless the forge failed
            elif root.issue_number is not None:
                _, body = ending_message(_quotable(text))
                blocked = run.state != RunState.CANCELLED
                self.lifecycle.ended(root.issue_number, repo, run.id, body, blocked=blocked)
        except FatalError as exc:
            if exc.kind != "missing_issue":
                raise
            self._events(run.id)("tracker", f"the issue is gone, so it is told nothing: {exc}")

    def _resolve_pending(self, run: Run, repo: RepoSettings) -> None:
        """The resolution the tracker refused while the run ended (``Recovery.resolve``)."""
        pending = [
            event.data[PENDING_RESOLUTION]
            for event in self.store.run_events(run.id)
            if isinstance(event.data.get(PENDING_RESOLUTION), dict)
        ]
        if pending:
            self.recovery.resolve_pending(repo, pending[-1])

    def _notify(self, run: Run, text: EndingText) -> None:
        kind: NotifyKind = "success" if not text.retryable else "escalation"
        if text.frozen:
            kind = "freeze"
        if kind == "success" and not self.settings.notify.notify_success:
            return
        key = f"notify:run={run.id}:ended"
        if self.store.has_side_effect(key):
            return
        title, body = ending_message(text)
        checkpoint("ending_notify", run.id)
        # The key is written with the outbox rows, in one transaction: no crash loses
        # the notification (key without rows) or queues it twice (rows without key).
        events = self._events(run.id)
        self.notifier.notify(title, body, kind=kind, events=events, run_id=run.id, key=key)

    def _events(self, run_id: int) -> EventSink:
        """The run's timeline without the lease: the run has ended, its fenced sink refuses."""

        def record(kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
            self.store.record_event(run_id, kind, message, data)

        return record

    # -- periodically ---------------------------------------------------------------

    def sweep(self) -> int:
        """Announce recent endings nobody announced; log freezes and unfreezes. How many."""
        self._watch_freezes()
        done = 0
        for run in self.store.unannounced_endings(self.since, DONE_PREFIX, SWEEP_LIMIT):
            try:
                self.announce(run)
                done += 1
            except CommentInFlight as exc:  # reserved by a replica, or by a process that died
                log.info("run %s: ending not announced yet (%s)", run.id, exc)
            except Exception as exc:  # the tracker may be down: the next pass retries
                log.warning("run %s: ending not announced yet (%s)", run.id, exc)
        return done

    def _watch_freezes(self) -> None:
        records = {record.name: record for record in self.store.list_repos()}  # one read
        for repo in self.settings.repos:
            record = records.get(repo.name)
            if record is None:
                continue
            before = self._frozen.get(repo.name)
            self._frozen[repo.name] = record.frozen
            if record.frozen and before is not True:
                run = record.frozen_run_id
                log.error(
                    "repo %s frozen by %s%s: %s; resume with: "
                    'pipeline repos unfreeze %s --note "..."',
                    repo.name,
                    record.frozen_by,
                    f" (run {run})" if run is not None else "",  # none: frozen by hand
                    _first_line(record.frozen_reason),
                    repo.name,
                )
            elif before and not record.frozen:
                log.warning("repo %s unfrozen; its queue runs again", repo.name)


def _quotable(text: EndingText) -> EndingText:
    """``text`` for the issue: what the agent, its tests or the CI wrote (the question, the
    error) inert there, so it mentions nobody and runs no quick action under the daemon's
    token (``inert_quote``)."""
    question = inert_quote(text.question) if text.question is not None else None
    return replace(text, what_happened=inert_quote(text.what_happened), question=question)


def _retryable(run: Run) -> bool:
    """Not a success, nor a fix-forward its broken run's ending superseded (a retry of it
    would end the same way; that run's ending names the next step)."""
    return run.state != RunState.SUCCEEDED and run.error_class != SUPERSEDED_CLASS


def _answerable(run: Run) -> bool:
    """An escalation a reply on the issue can answer (``pipeline.run.resume``)."""
    return run.state == RunState.ESCALATED and run.error_class in RESUMABLE_REASONS


def _done_key(run: Run) -> str:
    return f"{DONE_PREFIX}{run.id}"


def _headline(run: Run, frozen_here: bool) -> str:
    if frozen_here and run.state != RunState.SUCCEEDED:
        return "frozen"
    if run.error_class == TIMEOUT_CLASS:
        return "timed out"
    return str(run.state)


def _reason(run: Run) -> str:
    if run.state == RunState.SUCCEEDED or run.error_class in (None, run.state):
        return ""
    return run.error_class or ""


def _what_happened(run: Run) -> str:
    error = (run.error or "").strip()
    if run.state == RunState.SUCCEEDED:
        return run.summary or "the run succeeded"
    if run.error_class == TIMEOUT_CLASS:
        limit = f" of {run.timeout_s:g} s" if run.timeout_s else ""
        return f"The run hit its time limit{limit} ({_attempts(run)}): {error}"
    if run.state == RunState.FAILED:
        return f"The run failed for good ({_attempts(run)}): {error}"
    if _cancelled_after_push(run):
        return (
            f"The run was {error or 'cancelled'} after it had pushed {run.pushed_sha}: that "
            "commit stays where it was pushed, and its CI and deploy were not watched to the "
            "end."
        )
    if run.state == RunState.CANCELLED:
        return f"The run was {error or 'cancelled'}."
    return error or "the run needs a human"


def _cancelled_after_push(run: Run) -> bool:
    """A cancel that stopped the watch of a pushed commit (a retry watches it again)."""
    return run.state == RunState.CANCELLED and bool(run.pushed_sha)


def _attempts(run: Run) -> str:
    count = max(run.failures, 1)
    return f"{count} attempt{'s' if count != 1 else ''}"


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""
