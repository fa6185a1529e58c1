"""The embedded local tracker: issues kept in the daemon's own database.

It speaks the same ``Tracker`` protocol as the forges, so the rest of the
pipeline cannot tell it from a remote tracker. Local issues are filed under
the repo's name (``pipeline issue add --repo NAME``); the tracker maps the
slug the pipeline asks about to that name. An issue's number is its id in
``local_issues``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pipeline.config.settings import TrackerSettings
from pipeline.core.errors import FatalError
from pipeline.store import LocalIssue, Store
from pipeline.trackers.base import (
    CiState,
    Comment,
    EditHistory,
    IssueDetail,
    LabelMark,
    TrackerIssue,
)

LOCAL_AUTHOR = "afk-pipeline"
_ISSUE_REF = re.compile(r"(?<![\w/])#(\d+)\b")


def local_url(repo: str, number: int) -> str:
    return f"local://{repo}/issues/{number}"


class LocalTracker:
    """Tracker over the store's ``local_issues`` and ``local_comments`` tables."""

    def __init__(
        self, settings: TrackerSettings, store: Store, repo_names: Mapping[str, str] | None = None
    ) -> None:
        self.name = settings.name
        self.settings = settings
        self.store = store
        self.repo_names = dict(repo_names or {})  # slug -> repo name

    def _repo(self, slug: str) -> str:
        return self.repo_names.get(slug, slug)

    def _issue(self, slug: str, number: int) -> LocalIssue:
        issue = self.store.get_local_issue(number)
        if issue is None or issue.repo != self._repo(slug):
            raise FatalError("missing_issue", f"local issue {number} of {slug} does not exist")
        return issue

    def _tracker_issue(self, issue: LocalIssue) -> TrackerIssue:
        return TrackerIssue(
            number=issue.id,
            title=issue.title,
            body=issue.body,
            author=issue.author,
            url=local_url(issue.repo, issue.id),
            labels=issue.labels,
            state=issue.state,
            updated_at=issue.updated_at.isoformat(),
            external_id=str(issue.id),
        )

    def list_ready(self, slug: str) -> list[TrackerIssue] | None:
        issues = self.store.list_local_issues(
            repo=self._repo(slug), label=self.settings.ready_label
        )
        return [self._tracker_issue(i) for i in issues]

    def get_issue(self, slug: str, number: int) -> IssueDetail:
        issue = self._issue(slug, number)
        base = self._tracker_issue(issue)
        comments = tuple(
            Comment(author=c.author, body=c.body, created_at=c.created_at.isoformat(), id=str(c.id))
            for c in self.store.local_comments(issue.id)
        )
        return IssueDetail(**{**base.__dict__, "comments": comments})

    def issue(self, slug: str, number: int) -> TrackerIssue:
        return self._tracker_issue(self._issue(slug, number))

    def labeller(self, slug: str, number: int, label: str) -> str | None:
        issue = self._issue(slug, number)
        return issue.labeller if label in issue.labels else None

    def label_event(self, slug: str, number: int, label: str) -> LabelMark | None:
        """The labeller and the issue's last change (local issues keep no label times)."""
        issue = self._issue(slug, number)
        if label not in issue.labels:
            return None
        return LabelMark(issue.labeller, issue.updated_at.isoformat())

    def edit_history(self, slug: str, number: int, label: str) -> EditHistory:
        """Unattributed: the snapshot guards the body (local issues cannot be edited today)."""
        mark = self.label_event(slug, number, label)
        return EditHistory(labels=(mark,) if mark else (), attributed=False)

    def is_trusted(self, slug: str, actor: str) -> bool:
        # Local issues are written by whoever can reach the daemon's database;
        # a configured list narrows that down.
        return not self.settings.trusted_actors or actor in self.settings.trusted_actors

    def add_labels(self, slug: str, number: int, labels: Sequence[str]) -> None:
        self._issue(slug, number)
        self.store.change_local_labels(number, add=tuple(labels), by=LOCAL_AUTHOR)

    def remove_label(self, slug: str, number: int, label: str) -> None:
        self._issue(slug, number)
        self.store.change_local_labels(number, remove=(label,))

    def comment(self, slug: str, number: int, body: str) -> str:
        self._issue(slug, number)
        return str(self.store.add_local_comment(number, body, author=LOCAL_AUTHOR))

    def edit_comment(self, slug: str, number: int, comment_id: str, body: str) -> None:
        self._issue(slug, number)
        if not self.store.edit_local_comment(number, int(comment_id), body):
            raise FatalError(
                "missing_comment", f"comment {comment_id} of local issue {number} does not exist"
            )

    def list_comments(self, slug: str, number: int) -> list[Comment]:
        return list(self.get_issue(slug, number).comments)

    def close(self, slug: str, number: int, comment: str | None) -> None:
        if comment:
            self.comment(slug, number, comment)
        self.store.close_local_issue(number)

    def commit_ci_state(self, slug: str, sha: str) -> CiState:
        return CiState(state="none", details=("the local tracker runs no CI",))

    def open_pull_request(self, slug: str, head: str, base: str, title: str, body: str) -> str:
        """No pull requests here: a pseudo-URL, and one comment on each issue ``body`` names.

        ``#N`` references in ``body`` ("Closes #12") point at local issues of
        this repo; each gets a comment saying the branch is ready to merge.
        """
        url = f"local://{self._repo(slug)}/branches/{head}"
        note = f"Branch `{head}` is ready to merge into `{base}`: {title}\n\n{url}"
        for number in dict.fromkeys(int(n) for n in _ISSUE_REF.findall(body)):
            issue = self.store.get_local_issue(number)
            if issue is None or issue.repo != self._repo(slug):
                continue
            if not any(url in c.body for c in self.store.local_comments(number)):
                self.store.add_local_comment(number, note, author=LOCAL_AUTHOR)
        return url
