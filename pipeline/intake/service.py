"""From tracker issues to queued runs: polling, webhooks, trust.

Polling is the safety net and always on; a webhook is the fast path (GitHub
does not redeliver failed deliveries). Both end in ``consider``: an enrolled
repo, a ready label applied by a trusted actor, then ``store.enqueue``, which
dedupes on the issue so labelling twice enqueues once. Accepting a label
also keeps a snapshot of the title and body it vouched for.

A failing tracker backs off on its own (``retry-after`` or reset when the
forge says, else exponential) without stopping the others or the daemon. A
repo whose forge refuses its ready list (401, 403 without a rate limit, or 404:
the repo is missing or the token cannot see it) backs off too, and a human is
told once (``pipeline.intake.access``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import ConfigError, FatalError, RetryableError
from pipeline.intake.access import MAX_POLL_BACKOFF_S, AccessWatch
from pipeline.intake.commands import ResumeCommands, answered_run, label_spent
from pipeline.intake.dependencies import DependencyCheck, report_problem, vouched_refs
from pipeline.intake.lifecycle import OPEN_STATES, VIA_LABEL, Lifecycle
from pipeline.intake.lists import Lazy, Listed, fetch_lists
from pipeline.intake.passed_over import PassedOver, issue_scoped
from pipeline.intake.pushed import tell_watch_again
from pipeline.intake.records import IntakeMetrics, PollReport, TrackerHealth, Vouch, seen, vouch_for
from pipeline.notify.escalation import Notifies
from pipeline.store import Issue
from pipeline.store.pushed import pushed_run
from pipeline.store.roles import IntakeStore
from pipeline.store.runs import EnqueueOptions, EnqueueResult, QueueFull
from pipeline.trackers.base import Tracker, TrackerIssue
from pipeline.trackers.webhooks import WebhookPayloadError, parse_event, verify

log = logging.getLogger(__name__)

T = TypeVar("T")


class Intake:
    """Turns ready issues into queued runs."""

    def __init__(
        self,
        store: IntakeStore,
        settings: Settings,
        trackers: Mapping[str, Tracker],
        lifecycle: Lifecycle,
        *,
        clock: Callable[[], float] = time.monotonic,
        notifier: Notifies | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.trackers = trackers
        self.lifecycle = lifecycle
        self.clock = clock
        self.health = {name: TrackerHealth() for name in trackers}
        self._unfinished: dict[tuple[str, str], list[TrackerIssue]] = {}
        # (repo, number) -> the issue's updated_at when it was last considered: an issue
        # that has not changed since and still has a run in the queue is not considered
        # again (no tracker calls, no writes). See _settled.
        self._considered: dict[tuple[str, int], str | None] = {}
        # Issues held back by their dependencies, per repo: looked at again on every poll,
        # even when the ready list is unchanged (a dependency closed by a human changes
        # no ready list). One DependencyCheck per repo per poll fetches each issue once.
        self._waiting: dict[str, dict[int, TrackerIssue]] = {}
        self._listed: dict[str, frozenset[int]] = {}  # each repo's last ready list, by number
        self._checks: dict[str, DependencyCheck] = {}
        # The start-up poll and the periodic one may overlap: one poll at a time per
        # tracker (not overall, so a tracker that hangs until its timeout holds no other).
        self._poll_locks = {name: threading.Lock() for name in trackers}
        self.metrics = IntakeMetrics()
        # Set by whoever counts them (the HTTP server's metrics).
        self.on_poll_error: Callable[[str], None] | None = None
        self.on_webhook_rejected: Callable[[str, str], None] | None = None
        self.commands = ResumeCommands(store, settings, trackers, lifecycle)
        self.access = AccessWatch(self.poll_interval_s, clock, notifier, store)
        self.passed = PassedOver(self.poll_interval_s, clock)  # issues that failed alone

    def repos_of(self, tracker: str) -> list[RepoSettings]:
        return [r for r in self.settings.repos if r.tracker == tracker]

    def poll_interval_s(self, tracker: str) -> float:
        cfg = self.settings.tracker(tracker)
        return (cfg.poll_interval_s if cfg else None) or self.settings.poll_interval_s

    def repo_for(self, tracker: str, slug: str) -> RepoSettings | None:
        return next((r for r in self.repos_of(tracker) if r.slug.lower() == slug.lower()), None)

    # Polling -----------------------------------------------------------------

    def poll_all(self) -> list[PollReport]:
        return [self.poll(name) for name in self.trackers]

    def poll(self, tracker_name: str) -> PollReport:
        """One poll of every enrolled repo on one tracker; never raises.

        A transient error (5xx, timeout, rate limit, full queue) ends this
        tracker's cycle and backs it off; a repo-scoped one (a missing repo, no
        permission) is counted and logged, and the other repos are still polled;
        an issue-scoped one passes that issue over (``pipeline.intake.passed_over``).
        A repo whose token is refused is backed off on its own, and what changed
        in such refusals is told to a human at the end of the poll.
        """
        with self._poll_locks.setdefault(tracker_name, threading.Lock()):
            try:
                return self._poll(tracker_name)
            finally:
                self.access.tell(tracker_name)

    def _poll(self, tracker_name: str) -> PollReport:
        health = self.health.setdefault(tracker_name, TrackerHealth())
        if self.clock() < health.not_before:
            return PollReport(tracker_name, skipped=True, error=health.last_error)
        seen = enqueued = unchanged = 0
        repo_error: str | None = None
        in_queue = Lazy(self.store.issues_in_queue)  # read once per cycle, only if needed
        repos = [r for r in self.repos_of(tracker_name) if not self.access.waiting(r)]
        lists = fetch_lists(self.trackers[tracker_name], repos, self._concurrency(tracker_name))
        for index, (repo, listed) in enumerate(zip(repos, lists, strict=True)):
            try:
                counts = self._poll_repo(repo, in_queue, listed)
            except (RetryableError, QueueFull) as exc:
                self._keep_for_next_poll(repos[index + 1 :], lists[index + 1 :])
                return self._poll_failed(tracker_name, health, exc, seen, enqueued)
            except (FatalError, ConfigError) as exc:
                repo_error = f"{repo.name}: {exc}"
                self._count_poll_error(tracker_name)
                if self.access.refused(repo, exc) is None:
                    log.warning("tracker %s: poll of %s failed: %s", tracker_name, repo.name, exc)
                continue
            self.access.answered(repo)
            if counts is None:
                unchanged += 1
            else:
                seen, enqueued = seen + counts[0], enqueued + counts[1]
        try:  # `/afk resume` on escalated issues (not in the ready list): one read per cycle
            enqueued += self.commands.check([r for r in repos if not self.access.waiting(r)])
        except (RetryableError, QueueFull) as exc:
            return self._poll_failed(tracker_name, health, exc, seen, enqueued)
        except (FatalError, ConfigError) as exc:
            repo_error = f"resume commands: {exc}"
            log.warning("tracker %s: resume commands: %s", tracker_name, exc)
        health.failures, health.not_before, health.last_error = 0, 0.0, None
        return PollReport(
            tracker_name, seen=seen, enqueued=enqueued, unchanged=unchanged, error=repo_error
        )

    def _concurrency(self, tracker: str) -> int:
        cfg = self.settings.tracker(tracker)
        return cfg.poll_concurrency if cfg else 1

    def _poll_repo(
        self, repo: RepoSettings, in_queue: Lazy[set[tuple[str, int]]], listed: Listed
    ) -> tuple[int, int] | None:
        """``(seen, enqueued)`` for one repo, or ``None`` when its list is unchanged.

        A list whose processing failed half way is kept and processed again on
        the next poll: the forge answers that poll 304 ("unchanged") because
        the list itself was fetched, so without this the rest would be skipped.
        """
        key = (repo.tracker, repo.slug)
        self._checks.pop(repo.name, None)
        issues = listed.result()
        if issues is None:
            issues = self._unfinished.get(key) or self._again(repo)
            if not issues:
                return None
        else:
            self._forget_waiting(repo, {issue.number for issue in issues})
        self._unfinished[key] = issues
        enqueued = 0
        for issue in issues:
            if self._settled(repo, issue, in_queue) or not self.passed.due(repo, issue.number):
                continue
            try:
                result = self.consider(repo, issue)
            except (FatalError, RetryableError) as exc:  # the issue's alone: skip it, not the rest
                if not issue_scoped(exc):
                    raise
                self._count_poll_error(repo.tracker)
                self.passed.failed(repo, issue, exc)
                continue
            self.passed.done(repo, issue.number)
            enqueued += bool(result and result.created)
        del self._unfinished[key]
        return len(issues), enqueued

    def _again(self, repo: RepoSettings) -> list[TrackerIssue]:
        """On an unchanged list: the issues waiting on dependencies or passed over, due again."""
        again = {**self._waiting.get(repo.name, {}), **self.passed.pending(repo)}
        return [again[number] for number in sorted(again)]

    def _keep_for_next_poll(self, repos: list[RepoSettings], lists: list[Listed]) -> None:
        """Lists fetched (their ETags kept) but not processed this cycle are processed
        next time, when the forge answers them 304."""
        for repo, listed in zip(repos, lists, strict=True):
            if listed.issues is not None:
                self._unfinished[(repo.tracker, repo.slug)] = listed.issues

    def _settled(
        self, repo: RepoSettings, issue: TrackerIssue, in_queue: Lazy[set[tuple[str, int]]]
    ) -> bool:
        """True when ``issue`` is as it was last considered and its run is still queued or busy.

        Considering it again could only find the run already there: an unchanged
        list costs no tracker call and no write.
        """
        key = (repo.name, issue.number)
        if key not in self._considered or self._considered[key] != issue.updated_at:
            return False
        return key in in_queue.value

    def _poll_failed(
        self, name: str, health: TrackerHealth, exc: Exception, seen: int, enqueued: int
    ) -> PollReport:
        health.failures += 1
        base = min(MAX_POLL_BACKOFF_S, self.poll_interval_s(name) * 2 ** (health.failures - 1))
        wait = max(base, getattr(exc, "retry_after_s", None) or 0.0)
        if isinstance(exc, QueueFull):
            wait = max(wait, exc.retry_after_s)
        health.not_before = self.clock() + wait
        health.last_error = str(exc)
        self._count_poll_error(name)
        log.warning("tracker %s: poll failed (%s); next poll in %.0fs", name, exc, wait)
        return PollReport(name, seen=seen, enqueued=enqueued, error=str(exc))

    def _count_poll_error(self, name: str) -> None:
        self.metrics.poll_errors[name] = self.metrics.poll_errors.get(name, 0) + 1
        if self.on_poll_error is not None:
            self.on_poll_error(name)

    # Deciding ----------------------------------------------------------------

    def consider(
        self, repo: RepoSettings, issue: TrackerIssue, vouch: Vouch | None = None
    ) -> EnqueueResult | None:
        """Enqueue ``issue`` if its ready label came from a trusted actor and had no run yet.

        ``vouch``: what the forge said of the label, read beside the issue (webhooks)."""
        ready = self.lifecycle.tracker_settings[repo.tracker].ready_label
        if issue.is_pull_request or ready not in issue.labels or issue.state not in OPEN_STATES:
            return None
        vouch = vouch or self._vouch(repo, issue.number, None)
        actor, mark = vouch.actor, vouch.mark
        if actor is None or not vouch.trusted:
            log.info("%s#%s: ready label from untrusted %s ignored", repo.name, issue.number, actor)
            self.lifecycle.untrusted(repo, issue.number, actor)
            return None
        record = self.store.upsert_issue(repo.name, seen(repo, issue, actor, mark))
        if label_spent(self.store, record, mark):
            return None  # this label's run has ended: only a new label asks again
        pushed = pushed_run(self.store, record.id)  # its change is on the branch: watch it
        options = EnqueueOptions(
            issue_id=record.id,
            max_attempts=self.settings.scheduler.max_attempts,
            timeout_s=repo.run_timeout_s or self.settings.scheduler.run_timeout_s,
            requested_by=actor,
            max_queue_depth=self.settings.max_queue_depth,
            parent_id=None if pushed else answered_run(self.store, record.id),
            via=VIA_LABEL,
            pushed_sha=pushed.pushed_sha if pushed else None,
            base_sha=pushed.base_sha if pushed else None,
        )
        if not self._dependencies_done(repo, issue, record):
            return None
        result = self.store.enqueue(repo.name, options)
        if result.created:
            log.info("%s#%s: queued as run %s", repo.name, issue.number, result.run.id)
            if pushed is not None:
                tell_watch_again(self.lifecycle, (repo, issue.number), pushed, result.run)
        self._considered[(repo.name, issue.number)] = issue.updated_at
        return result

    # Dependencies ------------------------------------------------------------

    def _dependencies_done(self, repo: RepoSettings, issue: TrackerIssue, record: Issue) -> bool:
        """True when ``issue`` may start; else it is recorded as waiting, with why.

        The description as the label vouched for it (the snapshot) keeps its dependencies:
        an untrusted editor can add one, never remove one.
        """
        check = self._checks.get(repo.name)
        if check is None:
            check = self._checks[repo.name] = DependencyCheck(
                self.trackers[repo.tracker], repo.slug
            )
        verdict = check.verdict(issue.number, issue.body, vouched_refs(record.labelled_body))
        waiting = self._waiting.setdefault(repo.name, {})
        if verdict.ready:
            waiting.pop(issue.number, None)
            if record.waiting_reason is not None:
                self.store.set_waiting(record.id, None)
            return True
        if verdict.problem is not None:
            report_problem(
                verdict.problem,
                lambda number, key, body: self.lifecycle.comment_once(
                    repo, number, key, body, contended=True
                ),
            )
        waiting[issue.number] = issue
        if record.waiting_reason != verdict.reason:
            self.store.set_waiting(record.id, verdict.reason)
        log.info("%s#%s: not started: %s", repo.name, issue.number, verdict.reason)
        return False

    def _forget_waiting(self, repo: RepoSettings, listed: set[int]) -> None:
        """Issues no longer listed as ready (closed, unlabelled) wait for nothing."""
        waiting = self._waiting.setdefault(repo.name, {})
        self.passed.forget(repo, listed)
        for number in [n for n in waiting if n not in listed]:
            del waiting[number]
        if self._listed.get(repo.name) != frozenset(listed):  # an unchanged list writes nothing
            self.store.clear_waiting(repo.name, listed)
            self._listed[repo.name] = frozenset(listed)

    # Webhooks ----------------------------------------------------------------

    def handle_webhook(
        self, tracker_name: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, object]]:
        """Verify, dedupe and act on one delivery; answers at once, work goes on a thread."""
        tracker_cfg = self.settings.tracker(tracker_name)
        if tracker_cfg is None or tracker_name not in self.trackers:
            return 404, {"error": f"no tracker named {tracker_name!r}"}
        secret = tracker_cfg.webhook_secret.resolve()
        if not secret:
            return self._reject(tracker_name, 403, "webhooks are not configured for this tracker")
        lowered = {k.lower(): v for k, v in headers.items()}
        if not verify(tracker_cfg.kind, secret.encode(), lowered, body):
            return self._reject(tracker_name, 401, "missing or wrong signature")
        try:
            event = parse_event(tracker_cfg.kind, lowered, body)
        except WebhookPayloadError as exc:
            return self._reject(tracker_name, 400, str(exc))
        if event is None:
            return 202, {"status": "ignored", "reason": "not an issue label event"}
        if event.delivery_id and not self.store.record_delivery(tracker_name, event.delivery_id):
            return 200, {"status": "duplicate", "delivery": event.delivery_id}
        repo = self.repo_for(tracker_name, event.repo_slug)
        if repo is None:
            return 202, {"status": "ignored", "reason": f"{event.repo_slug} is not enrolled"}
        if not event.added(tracker_cfg.ready_label):
            return 202, {"status": "ignored", "reason": "not the ready label"}
        # GitHub's ``labeled`` and GitLab's label change name who added this label;
        # Gitea's ``label_updated`` names whoever changed any label, so there the
        # labeller is looked up (else a trusted user's edit would vouch for another's label).
        labeller = event.sender if tracker_cfg.kind in ("github", "gitlab") else ""
        threading.Thread(
            target=self._fetch_and_consider,
            args=(repo, event.issue_number, labeller),
            name=f"webhook-{tracker_name}-{event.issue_number}",
            daemon=True,
        ).start()
        return 202, {"status": "accepted", "issue": event.issue_number}

    def _vouch(self, repo: RepoSettings, number: int, labeller: str | None) -> Vouch:
        ready = self.lifecycle.tracker_settings[repo.tracker].ready_label
        return vouch_for(self.trackers[repo.tracker], repo.slug, number, ready, labeller)

    def _fetch_and_consider(self, repo: RepoSettings, number: int, sender: str) -> None:
        """A webhook's issue: the issue, its label event and the labeller's permission
        are read at once, so the pickup waits for the slowest read, not their sum."""
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="webhook-issue") as pool:
                detail = pool.submit(self.trackers[repo.tracker].get_issue, repo.slug, number)
                vouch = self._vouch(repo, number, sender or None)
                issue = detail.result()
            self.consider(repo, issue, vouch)
        except (RetryableError, FatalError, QueueFull) as exc:
            # Polling is the safety net: the issue is picked up on the next poll.
            log.warning(
                "%s#%s: webhook pickup failed (%s); polling will retry", repo.name, number, exc
            )

    def _reject(self, tracker: str, status: int, reason: str) -> tuple[int, dict[str, object]]:
        log.warning("webhook for %s rejected (%s): %s", tracker, status, reason)
        self.metrics.webhooks_rejected[tracker] = self.metrics.webhooks_rejected.get(tracker, 0) + 1
        if self.on_webhook_rejected is not None:
            self.on_webhook_rejected(tracker, reason)
        return status, {"error": reason}


def dumps(payload: Mapping[str, object]) -> bytes:
    return json.dumps(payload).encode()
