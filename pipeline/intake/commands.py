"""The ``/afk resume`` comment: answering an escalated run without touching labels.

Re-adding the ready label is one way to answer a blocked agent; the other is a
comment whose first line is the tracker's ``resume_command`` (``/afk resume``
unless configured; ``""`` turns it off), posted after the escalation by a
trusted author. Each poll reads the comments of the issues whose latest run
escalated ``blocked`` or ``tests_red`` (one list call per such issue) and
queues the answering run, linked to the escalated one like a re-label
(``pipeline.run.resume``). A stranger's command starts nothing and is
answered once on the issue.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.states import RESUMABLE_REASONS, TERMINAL_STATES, RunState
from pipeline.intake.answers import comments_after
from pipeline.intake.issue_text import posted_by_daemon
from pipeline.intake.lifecycle import Lifecycle, marker
from pipeline.intake.sanitize import strip_hidden
from pipeline.store import Issue, Run, RunFilter
from pipeline.store.roles import IntakeStore
from pipeline.store.runs import EnqueueOptions
from pipeline.trackers.base import Comment, LabelMark, Tracker

log = logging.getLogger(__name__)

# How many escalated runs (of a tracker's repos) a poll cycle looks at, newest first.
MAX_WATCHED = 50


def is_command(body: str, command: str) -> bool:
    """True when the comment's first visible line is ``command`` (case and spaces aside)."""
    lines = strip_hidden(body).text.strip().splitlines()
    return bool(lines) and " ".join(lines[0].split()).lower() == command.lower()


def answered_run(store: IntakeStore, issue_id: int) -> int | None:
    """The escalated run a new run of the issue answers: the agent asked, a human replied.

    Re-adding the ready label after a ``blocked`` or ``tests_red`` escalation links the
    new run to it (``parent_id``); the flow then resumes that run's agent session.
    """
    last = store.list_runs(RunFilter(issue_id=issue_id, limit=1))
    if last and last[0].state == RunState.ESCALATED:
        return last[0].id if last[0].error_class in RESUMABLE_REASONS else None
    return None


def label_spent(store: IntakeStore, record: Issue, mark: LabelMark | None) -> bool:
    """True when the labelling ``mark`` names has had its run, and that run has ended.

    A run can end before the daemon swaps the label for ``agent-working`` (cancelled while
    queued, the issue closed, failed before its claim): the label is still there, and it
    asks for one run, not one after each change of the issue. A new label (a later time)
    asks again; a forge that does not say when the label came is taken at its word.
    """
    taken = record.snapshot_taken_at
    if mark is None or taken is None or record.labelled_at != mark.at:
        return False
    last = store.list_runs(RunFilter(issue_id=record.id, limit=1))
    return bool(last) and last[0].state in TERMINAL_STATES and last[0].created_at >= taken


class ResumeCommands:
    """Queues the answering run when a trusted author comments the resume command."""

    def __init__(
        self,
        store: IntakeStore,
        settings: Settings,
        trackers: Mapping[str, Tracker],
        lifecycle: Lifecycle,
    ) -> None:
        self.store = store
        self.settings = settings
        self.trackers = trackers
        self.lifecycle = lifecycle

    def check(self, repos: list[RepoSettings]) -> int:
        """Look for the command on these repos' escalated issues; how many runs it queued.

        One query per poll cycle, whatever the number of repos (the escalated runs
        newest first); then one comment list per answerable issue.
        """
        by_name = {repo.name: repo for repo in repos if self._command(repo)}
        if not by_name:
            return 0
        queued = 0
        for run in self._waiting(set(by_name)):
            repo = by_name[run.repo_name]
            queued += self._check_run(repo, run, self._command(repo))
        return queued

    def _command(self, repo: RepoSettings) -> str:
        tracker_settings = self.settings.tracker(repo.tracker)
        return " ".join((tracker_settings.resume_command if tracker_settings else "").split())

    def _waiting(self, repos: set[str]) -> list[Run]:
        """Escalated runs of ``repos`` that are still their issue's latest and a reply can
        answer."""
        flt = RunFilter(state=RunState.ESCALATED, limit=MAX_WATCHED)
        waiting = []
        for run in self.store.list_runs(flt):
            if run.repo_name not in repos or run.kind != "issue":
                continue
            if run.issue_id is None or run.issue_number is None:
                continue
            if run.error_class not in RESUMABLE_REASONS:
                continue
            latest = self.store.list_runs(RunFilter(issue_id=run.issue_id, limit=1))
            if latest and latest[0].id == run.id:
                waiting.append(run)
        return waiting

    def _check_run(self, repo: RepoSettings, run: Run, command: str) -> bool:
        assert run.issue_number is not None  # _waiting keeps issue runs only
        tracker = self.trackers[repo.tracker]
        comments = tracker.list_comments(repo.slug, run.issue_number)
        mark = marker(f"run={run.id}:ended")
        for comment in comments_after(comments, mark, run.finished_at):
            if posted_by_daemon(comment) or not is_command(comment.body, command):
                continue
            if tracker.is_trusted(repo.slug, comment.author):
                return self._queue(repo, run, comment)
            self._refuse(repo, run, comment.author, command)
        return False

    def _queue(self, repo: RepoSettings, run: Run, comment: Comment) -> bool:
        options = EnqueueOptions(
            issue_id=run.issue_id,
            parent_id=run.id,
            max_attempts=self.settings.scheduler.max_attempts,
            timeout_s=repo.run_timeout_s or self.settings.scheduler.run_timeout_s,
            requested_by=comment.author,
            max_queue_depth=self.settings.max_queue_depth,
        )
        result = self.store.enqueue(repo.name, options)
        if result.created:
            log.info(
                "%s#%s: %s answered run %s; queued as run %s",
                repo.name,
                run.issue_number,
                comment.author,
                run.id,
                result.run.id,
            )
        return result.created

    def _refuse(self, repo: RepoSettings, run: Run, author: str, command: str) -> None:
        """Once per escalated run and author: the command was not theirs to give."""
        assert run.issue_number is not None
        who = f"@{author}" if author else "an unknown user"
        body = (
            f"`{command}` by {who} is ignored: only people with write access to this "
            "repository (or a configured trusted actor) can resume the agent."
        )
        key = f"run={run.id}:untrusted-resume:{author or 'unknown'}"
        self.lifecycle.comment_once(repo, run.issue_number, key, body, run.id, contended=True)
