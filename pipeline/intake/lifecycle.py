"""An issue's labels and comments as its run moves: claimed, resolved, ended.

Every comment carries a hidden marker (``<!-- afk-pipeline:run=12:claimed -->``)
and is posted only when no comment with that marker exists yet, so retries,
restarts and a second replica never post it twice. The store's side-effect key
is a fast path in front of that check, not the source of truth: a crash between
posting and recording is caught by the marker.

A contended comment (a run's ending, where the worker, the endings pass and
other replicas meet) is reserved in the store before it is posted and settled
after. A process killed in between leaves a pending reservation: once it is
older than ``stale_s`` (a lease) the next pass takes it over, looks for the
marker and posts only if the comment is not there, so the comment is neither
lost nor posted twice.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.config.settings import RepoSettings, TrackerSettings
from pipeline.core.events import EventSink
from pipeline.core.faults import checkpoint
from pipeline.core.masking import mask
from pipeline.intake.sanitize import inert_comments, inert_quote
from pipeline.store import Run, Store
from pipeline.trackers.base import Tracker, TrackerIssue, carries_mark

MARKER = "<!-- afk-pipeline:{key} -->"
OPEN_STATES = ("open", "opened", "")  # GitLab says "opened"
VIA_LABEL = "label"  # a run intake queued for the ready label (``EnqueueOptions.via``)

# How long a reserved, unsettled comment belongs to whoever reserved it (the default lease).
STALE_S = 60.0


class CommentInFlight(Exception):
    """A contended comment is reserved by someone else, recently: try again later."""


def marker(key: str) -> str:
    return MARKER.format(key=key)


def comment_effect(repo: RepoSettings, number: int, key: str) -> str:
    """The store key of the comment ``key`` on issue ``number``."""
    return f"comment:{repo.tracker}:{repo.slug}#{number}:{key}"


class Lifecycle:
    """Posts the comments and flips the labels that tell humans where an issue is."""

    def __init__(
        self,
        store: Store,
        trackers: Mapping[str, Tracker],
        tracker_settings: Mapping[str, TrackerSettings],
        dashboard_url: str | None = None,
        stale_s: float = STALE_S,
    ) -> None:
        self.store = store
        self.trackers = trackers
        self.tracker_settings = tracker_settings
        self.dashboard_url = dashboard_url
        self.stale_s = stale_s

    def _run_link(self, run: Run) -> str:
        return self.run_link(run.id)

    def run_link(self, run_id: int) -> str:
        """Where a human reads run ``run_id``: its dashboard page, else the command."""
        if self.dashboard_url:
            return f"{self.dashboard_url.rstrip('/')}/runs/{run_id}"
        return f"`pipeline runs show {run_id}`"

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
        ``contended`` comments (intake, endings, where replicas race) are reserved
        in the store first (``reserved_comment``); one reserved elsewhere a moment
        ago is left to its reserver here.
        """
        if contended:
            try:
                return self.reserved_comment(repo, number, key, body, run_id)
            except CommentInFlight:
                return False
        effect = comment_effect(repo, number, key)
        if self.store.has_side_effect(effect):
            return False
        posted = self._post_unless_there(repo, number, key, body)
        self.store.claim_side_effect(effect, run_id=run_id)
        return posted

    def reserved_comment(
        self, repo: RepoSettings, number: int, key: str, body: str, run_id: int | None
    ) -> bool:
        """Post ``body`` once across replicas, passes and crashes. True if posted.

        The store key is reserved before the post and settled after. Settled: False.
        Reserved less than ``stale_s`` ago: ``CommentInFlight`` (try again later).
        Older, its reserver died: taken over, and posted only if the marker is not
        on the issue yet (the reserver may have died after posting).
        """
        effect = comment_effect(repo, number, key)
        claim = self.store.claim_pending(effect, self.stale_s, run_id)
        if claim == "settled":
            return False
        if claim == "busy":
            raise CommentInFlight(f"{effect}: reserved under {self.stale_s:g} s ago")
        try:
            if run_id is not None:
                checkpoint("comment_reserved", run_id)
            posted = self._post_unless_there(repo, number, key, body)
        except Exception:
            self.store.release_side_effect(effect)
            raise
        self.store.settle_side_effect(effect)
        return posted

    def _post_unless_there(self, repo: RepoSettings, number: int, key: str, body: str) -> bool:
        """Post ``body`` with ``key``'s marker unless the issue has it already. True if posted."""
        tracker, tag = self.trackers[repo.tracker], marker(key)
        if any(carries_mark(c, tag) for c in tracker.list_comments(repo.slug, number)):
            return False
        tracker.comment(repo.slug, number, f"{inert_comments(mask(body))}\n\n{tag}")
        return True

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
        body = (  # the CI's and the deploy's words are theirs: quoted inert
            f"Done in {sha} on `{repo.default_branch}` (run {run_id}).\n\n"
            f"- CI: {inert_quote(ci)}\n- Deploy: {inert_quote(deploy)}"
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
        # A reservation left by a process that died raises ``CommentInFlight`` until it is
        # stale, so the ending stays unannounced and the endings pass comes back to it.
        return self.reserved_comment(repo, number, f"run={run_id}:ended", body, run_id)

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
