"""An issue's labels and comments as its run moves: claimed, resolved, ended.

Every comment carries a hidden marker (``<!-- afk-pipeline:run=12:claimed -->``)
and is posted only when no comment with that marker exists yet, so retries,
restarts and a second replica never post it twice. The store's side-effect key
is a fast path in front of that check, not the source of truth: a crash between
posting and recording is caught by the marker.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.config.settings import RepoSettings, TrackerSettings
from pipeline.core.events import EventSink
from pipeline.core.masking import mask
from pipeline.store import Run, Store
from pipeline.trackers.base import Tracker, TrackerIssue, carries_mark

MARKER = "<!-- afk-pipeline:{key} -->"
OPEN_STATES = ("open", "opened", "")  # GitLab says "opened"
VIA_LABEL = "label"  # a run intake queued for the ready label (``EnqueueOptions.via``)


def marker(key: str) -> str:
    return MARKER.format(key=key)


class Lifecycle:
    """Posts the comments and flips the labels that tell humans where an issue is."""

    def __init__(
        self,
        store: Store,
        trackers: Mapping[str, Tracker],
        tracker_settings: Mapping[str, TrackerSettings],
        dashboard_url: str | None = None,
    ) -> None:
        self.store = store
        self.trackers = trackers
        self.tracker_settings = tracker_settings
        self.dashboard_url = dashboard_url

    def _run_link(self, run: Run) -> str:
        if self.dashboard_url:
            return f"{self.dashboard_url.rstrip('/')}/runs/{run.id}"
        return f"`pipeline runs show {run.id}`"

    def comment_once(
        self,
        repo: RepoSettings,
        number: int,
        key: str,
        body: str,
        run_id: int | None = None,
        *,
        contended: bool = False,
    ) -> bool:
        """Post ``body`` unless a comment with ``key``'s marker exists. True if posted.

        A run's own comments are written only by the run's lease holder, so the
        marker check alone is exact, and a crash after posting is caught by it.
        ``contended`` comments (intake, where replicas race) take the store key
        first, so two replicas never both post.
        """
        tracker = self.trackers[repo.tracker]
        effect = f"comment:{repo.tracker}:{repo.slug}#{number}:{key}"
        if contended:
            if not self.store.claim_side_effect(effect, run_id=run_id):
                return False
        elif self.store.has_side_effect(effect):
            return False
        tag = marker(key)
        try:
            comments = tracker.list_comments(repo.slug, number)
            posted = not any(carries_mark(c, tag) for c in comments)
            if posted:
                tracker.comment(repo.slug, number, f"{mask(body)}\n\n{tag}")
        except Exception:
            if contended:
                self.store.release_side_effect(effect)
            raise
        if not contended:
            self.store.claim_side_effect(effect, run_id=run_id)
        return posted

    def claimed(self, run: Run, repo: RepoSettings, events: EventSink) -> None:
        """``agent-working`` replaces the ready label; a comment links to the run."""
        if run.issue_number is None:
            return
        labels = self.tracker_settings[repo.tracker]
        tracker = self.trackers[repo.tracker]
        tracker.add_labels(repo.slug, run.issue_number, [labels.working_label])
        tracker.remove_label(repo.slug, run.issue_number, labels.ready_label)
        tracker.remove_label(repo.slug, run.issue_number, labels.blocked_label)
        body = f"An agent is working on this issue: run {run.id} ({self._run_link(run)})."
        if self.comment_once(repo, run.issue_number, f"run={run.id}:claimed", body, run.id):
            events("tracker", f"issue #{run.issue_number}: labelled {labels.working_label}")

    def succeeded(self, run: Run, repo: RepoSettings, sha: str, ci: str, deploy: str) -> None:
        """A comment with the commit and the CI and deploy results; the issue is closed."""
        if run.issue_number is None:
            return
        self.resolve_issue(run.id, run.issue_number, repo, sha, ci, deploy)

    def resolve_issue(
        self, run_id: int, number: int, repo: RepoSettings, sha: str, ci: str, deploy: str
    ) -> None:
        labels = self.tracker_settings[repo.tracker]
        tracker = self.trackers[repo.tracker]
        body = (
            f"Done in {sha} on `{repo.default_branch}` (run {run_id}).\n\n"
            f"- CI: {ci}\n- Deploy: {deploy}"
        )
        self.comment_once(repo, number, f"run={run_id}:resolved", body, run_id)
        tracker.remove_label(repo.slug, number, labels.working_label)
        tracker.close(repo.slug, number, None)

    def ended(
        self, number: int, repo: RepoSettings, run_id: int, body: str, *, blocked: bool
    ) -> bool:
        """The issue after a run's ending: ``agent-working`` gone, ``agent-blocked`` if a human
        is needed, and one comment saying what happened and what to do next. True if posted."""
        labels = self.tracker_settings[repo.tracker]
        tracker = self.trackers[repo.tracker]
        if blocked:
            tracker.add_labels(repo.slug, number, [labels.blocked_label])
        tracker.remove_label(repo.slug, number, labels.working_label)
        # Contended: the worker's announcement and the periodic pass (or another
        # replica's) may race for the same ending; the store key lets one post.
        key = f"run={run_id}:ended"
        return self.comment_once(repo, number, key, body, run_id, contended=True)

    def withdrawal(self, repo: RepoSettings, issue: TrackerIssue, *, by_label: bool) -> str | None:
        """How a human withdrew ``issue`` from the agent, or ``None`` if it is still wanted.

        Closed withdraws any run. For a run queued for the ready label (``by_label``), so
        does an issue carrying neither that label nor ``agent-working``, the label the
        daemon itself puts in its place when it claims the issue (``claimed``): the
        daemon's own swap never reads as a withdrawal. Runs queued otherwise (a retry, a
        resume command, the API) never carried the ready label, and only closing counts.
        """
        if issue.state not in OPEN_STATES:
            return f"issue #{issue.number} was closed"
        labels = self.tracker_settings[repo.tracker]
        if by_label and not {labels.ready_label, labels.working_label} & set(issue.labels):
            return f"issue #{issue.number} lost its `{labels.ready_label}` label"
        return None

    def ready_label(self, repo: RepoSettings) -> str:
        return self.tracker_settings[repo.tracker].ready_label

    def untrusted(self, repo: RepoSettings, number: int, actor: str | None) -> None:
        """One comment saying why an untrusted label is ignored."""
        labels = self.tracker_settings[repo.tracker]
        who = f"@{actor}" if actor else "an unknown user"
        body = (
            f"The `{labels.ready_label}` label was applied by {who}, who is not trusted to "
            "start agent runs on this repository, so it is ignored. A maintainer with write "
            "access (or a configured trusted actor) must apply it."
        )
        self.comment_once(repo, number, f"untrusted:{actor or 'unknown'}", body, contended=True)
