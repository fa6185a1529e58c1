"""The in-memory world a fake forge serves: repos, issues, labels, events, CI.

Tests seed it directly (``add_issue``, ``apply_label``, ``set_permission``,
``add_status``...) and read it back (``issue(...)``) to check what a client
changed over HTTP. Every change goes through ``lock`` because the server runs
in its own thread. Timestamps come from a counter, so they are strictly
increasing and deterministic.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class FakeComment:
    id: int
    author: str
    body: str
    created_at: str
    system: bool = False
    updated_at: str = ""  # set by an edit
    edits: list[str] = field(default_factory=list)  # the bodies an edit replaced, oldest first


@dataclass
class LabelEvent:
    id: int
    label: str
    actor: str
    added: bool
    created_at: str


@dataclass
class ContentEdit:
    """A change of an issue's title or body: who, when, what it was and became."""

    id: int
    field: str  # title | body
    editor: str
    old: str
    new: str
    at: str


@dataclass
class FakeIssue:
    id: int
    number: int
    title: str
    body: str
    author: str
    labels: list[str]
    created_at: str
    updated_at: str
    state: str = "open"
    is_pull_request: bool = False
    head: str = ""  # pull requests: source branch
    base: str = ""  # pull requests: target branch
    comments: list[FakeComment] = field(default_factory=list)
    events: list[LabelEvent] = field(default_factory=list)
    edits: list[ContentEdit] = field(default_factory=list)


@dataclass
class FakeStatus:
    context: str
    state: str
    target_url: str = ""
    description: str = ""


@dataclass
class FakeCheckRun:
    id: int
    name: str
    status: str  # queued | in_progress | completed
    conclusion: str | None = None
    details_url: str = ""


@dataclass
class FakePipeline:
    id: int
    sha: str
    status: str
    web_url: str = ""
    created_at: str = ""


@dataclass
class FakeRepo:
    id: int
    slug: str
    issues: dict[int, FakeIssue] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)  # name -> id
    permissions: dict[str, str] = field(default_factory=dict)  # user -> forge permission
    statuses: dict[str, list[FakeStatus]] = field(default_factory=dict)
    check_runs: dict[str, list[FakeCheckRun]] = field(default_factory=dict)
    pipelines: list[FakePipeline] = field(default_factory=list)


class ForgeState:
    """Seeding and inspection of a fake forge's data (thread-safe)."""

    def __init__(self, *, bot: str = "afk-bot") -> None:
        self.bot = bot  # the user the token belongs to: author of what clients post
        self.lock = threading.RLock()
        self.repos: dict[str, FakeRepo] = {}
        self._ids = itertools.count(1001)
        self._ticks = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def now(self) -> str:
        """A fresh timestamp, later than every earlier one."""
        return (_EPOCH + timedelta(seconds=next(self._ticks))).strftime("%Y-%m-%dT%H:%M:%SZ")

    def add_repo(self, slug: str) -> FakeRepo:
        with self.lock:
            return self.repos.setdefault(slug, FakeRepo(id=self.next_id(), slug=slug))

    def add_issue(
        self,
        slug: str,
        title: str,
        *,
        body: str = "",
        author: str = "alice",
        labels: Iterable[str] = (),
        labelled_by: str | None = None,
    ) -> int:
        """A new open issue (or PR), its labels applied by ``labelled_by`` or the author."""
        with self.lock:
            repo = self.add_repo(slug)
            number = len(repo.issues) + 1
            stamp = self.now()
            repo.issues[number] = FakeIssue(
                id=self.next_id(),
                number=number,
                title=title,
                body=body,
                author=author,
                labels=[],
                created_at=stamp,
                updated_at=stamp,
            )
            for label in labels:
                self.apply_label(slug, number, label, labelled_by or author)
            return number

    def open_pull(
        self, slug: str, head: str, base: str, title: str, body: str, author: str
    ) -> FakeIssue | None:
        """A new open pull request, or ``None`` if one from ``head`` into ``base`` is open."""
        with self.lock:
            if self.pulls(slug, head, base):
                return None
            number = self.add_issue(slug, title, body=body, author=author)
            pull = self.issue(slug, number)
            pull.is_pull_request, pull.head, pull.base = True, head, base
            return pull

    def add_pull_request(self, slug: str, title: str, *, labels: Iterable[str] = ()) -> int:
        """An open pull request as the issue list shows it (no branches), labelled by its author."""
        with self.lock:
            number = self.add_issue(slug, title, labels=labels)
            self.issue(slug, number).is_pull_request = True
            return number

    def pulls(self, slug: str, head: str | None = None, base: str | None = None) -> list[FakeIssue]:
        """Open pull requests, optionally only those from ``head`` / into ``base``.

        An unknown repo is a ``KeyError`` (the routes answer 404).
        """
        with self.lock:
            return [
                i
                for i in self.repos[slug].issues.values()
                if i.is_pull_request
                and i.state == "open"
                and head in (None, i.head)
                and base in (None, i.base)
            ]

    def issue(self, slug: str, number: int) -> FakeIssue:
        with self.lock:
            return self.repos[slug].issues[number]

    def label_id(self, slug: str, name: str) -> int:
        """The repo label's id, creating the label if needed."""
        with self.lock:
            labels = self.add_repo(slug).labels
            if name not in labels:
                labels[name] = self.next_id()
            return labels[name]

    def delete_label(self, slug: str, name: str) -> None:
        """An admin deletes the repo's label: it leaves every issue; made again, it has a new id."""
        with self.lock:
            repo = self.repos[slug]
            repo.labels.pop(name, None)
            for issue in repo.issues.values():
                if name in issue.labels:
                    issue.labels.remove(name)

    def create_label(self, slug: str, name: str) -> int:
        """An admin makes a label (a fresh id, as forges give)."""
        with self.lock:
            return self.label_id(slug, name)

    def apply_label(self, slug: str, number: int, label: str, actor: str) -> None:
        with self.lock:
            issue = self.issue(slug, number)
            self.label_id(slug, label)
            if label not in issue.labels:
                issue.labels.append(label)
                self._label_event(issue, label, actor, added=True)

    def unlabel(self, slug: str, number: int, label: str, actor: str) -> bool:
        with self.lock:
            issue = self.issue(slug, number)
            if label not in issue.labels:
                return False
            issue.labels.remove(label)
            self._label_event(issue, label, actor, added=False)
            return True

    def add_comment(self, slug: str, number: int, body: str, author: str) -> FakeComment:
        with self.lock:
            issue = self.issue(slug, number)
            comment = FakeComment(self.next_id(), author, body, self.now())
            issue.comments.append(comment)
            issue.updated_at = comment.created_at
            return comment

    def edit_comment(self, slug: str, comment_id: int, body: str) -> tuple[FakeIssue, FakeComment]:
        """Replace a comment's body, keeping the old one in ``edits``; KeyError if none."""
        with self.lock:
            for issue in self.repos[slug].issues.values():
                for comment in issue.comments:
                    if comment.id == comment_id:
                        comment.edits.append(comment.body)
                        comment.body, comment.updated_at = body, self.now()
                        return issue, comment
        raise KeyError(comment_id)

    def edit_issue(
        self,
        slug: str,
        number: int,
        editor: str,
        *,
        title: str | None = None,
        body: str | None = None,
    ) -> None:
        """``editor`` changes the title and/or body (each change recorded with its time)."""
        with self.lock:
            issue = self.issue(slug, number)
            stamp = self.now()
            for name, new in (("title", title), ("body", body)):
                old = getattr(issue, name)
                if new is not None and new != old:
                    issue.edits.append(ContentEdit(self.next_id(), name, editor, old, new, stamp))
                    setattr(issue, name, new)
            issue.updated_at = stamp

    def set_state(self, slug: str, number: int, state: str) -> None:
        with self.lock:
            issue = self.issue(slug, number)
            issue.state = state
            issue.updated_at = self.now()

    def set_permission(self, slug: str, user: str, permission: str) -> None:
        """GitHub/Gitea: ``admin``/``write``/``read``; GitLab: an access level like ``30``."""
        with self.lock:
            self.add_repo(slug).permissions[user] = permission

    def add_status(
        self, slug: str, sha: str, context: str, state: str, target_url: str = ""
    ) -> None:
        with self.lock:
            statuses = self.add_repo(slug).statuses.setdefault(sha, [])
            statuses.append(FakeStatus(context, state, target_url, f"{context} is {state}"))

    def add_check_run(
        self, slug: str, sha: str, name: str, status: str, conclusion: str | None = None
    ) -> None:
        with self.lock:
            runs = self.add_repo(slug).check_runs.setdefault(sha, [])
            run_id = self.next_id()
            runs.append(FakeCheckRun(run_id, name, status, conclusion, f"https://ci.test/{run_id}"))

    def add_pipeline(self, slug: str, sha: str, status: str) -> int:
        with self.lock:
            pipeline_id = self.next_id()
            url = f"https://ci.test/pipelines/{pipeline_id}"
            pipeline = FakePipeline(pipeline_id, sha, status, url, self.now())
            self.add_repo(slug).pipelines.append(pipeline)
            return pipeline_id

    def _label_event(self, issue: FakeIssue, label: str, actor: str, *, added: bool) -> None:
        stamp = self.now()
        issue.events.append(LabelEvent(self.next_id(), label, actor, added, stamp))
        issue.updated_at = stamp
