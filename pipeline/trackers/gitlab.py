"""GitLab (gitlab.com or self-managed) over ``/api/v4``.

A project is addressed by its URL-encoded path (``group%2Fsub%2Fname``), an
issue by its ``iid``. Open issues are ``state=opened``; lists page by
``x-next-page``; labels are plain strings, changed with ``add_labels`` /
``remove_labels`` on ``PUT issues/:iid``; comments are notes (system notes left
out); the labeller comes from ``resource_label_events``; CI is the newest
pipeline for the SHA. Trust by permission means Developer (30) or above, read for
the one user (``/users?username=``, then ``members/all/:user_id``), never from a
list of members, which pages.

Who edited an issue comes from its system notes: GitLab writes one, authored
by the editor, for every description change ("changed the description") and
title change ("changed title from ... to ..."). The notes keep no text, so an
older revision's text is unknown here; the daemon's snapshot may supply it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx

from pipeline.config.settings import TrackerSettings
from pipeline.trackers.base import (
    CiState,
    Comment,
    EditHistory,
    IssueDetail,
    LabelMark,
    Revision,
    TrackerIssue,
    as_dict,
    as_list,
    field,
    label_names,
    parse_time,
    split_slug,
    text,
)
from pipeline.trackers.http import ForgeHttp, HttpOptions, Page, Params, link_next
from pipeline.trackers.identity import TokenUser
from pipeline.trackers.token import TokenHeader

GITLAB_URL = "https://gitlab.com"
DEVELOPER_ACCESS = 30
PENDING = frozenset(
    {"created", "waiting_for_resource", "preparing", "pending", "running", "scheduled", "manual"}
)
FAILED = frozenset({"failed"})
CANCELLED = frozenset({"canceled", "canceling"})  # stopped before a verdict: no failure


class GitLabTracker:
    """The ``Tracker`` for a GitLab instance (``base_url`` is the site or its ``/api/v4``)."""

    def __init__(
        self,
        settings: TrackerSettings,
        token: str,
        *,
        options: HttpOptions | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.name = settings.name
        self.settings = settings
        base = (settings.base_url or GITLAB_URL).rstrip("/")
        self.http = ForgeHttp(
            "gitlab",
            base if base.endswith("/api/v4") else f"{base}/api/v4",
            {"Accept": "application/json"},
            auth=TokenHeader("PRIVATE-TOKEN", "{}", token, settings.token),
            options=options,
            transport=transport,
        )
        self.me = TokenUser(self.http, "/user", "username")

    def __repr__(self) -> str:
        return f"GitLabTracker(name={self.name!r}, http={self.http!r})"

    def list_ready(self, slug: str) -> list[TrackerIssue] | None:
        params = {"labels": self.settings.ready_label, "state": "opened", "per_page": "100"}
        items = self.http.collect(f"{_project(slug)}/issues", params, next_page, conditional=True)
        if items is None:
            return None
        issues = [parse_issue(as_dict(item, f"gitlab list {slug}")) for item in items]
        return sorted(issues, key=lambda i: i.number)

    def get_issue(self, slug: str, number: int) -> IssueDetail:
        issue = self.issue(slug, number)
        return IssueDetail(**vars(issue), comments=tuple(self.list_comments(slug, number)))

    def issue(self, slug: str, number: int) -> TrackerIssue:
        page = self.http.get(f"{_project(slug)}/issues/{number}", not_found="missing_issue")
        return parse_issue(as_dict(page.data, page.url))

    def labeller(self, slug: str, number: int, label: str) -> str | None:
        mark = self.label_event(slug, number, label)
        return mark.actor if mark else None

    def label_event(self, slug: str, number: int, label: str) -> LabelMark | None:
        marks = self._label_marks(slug, number, label)
        return marks[-1] if marks else None

    def edit_history(self, slug: str, number: int, label: str) -> EditHistory:
        page = self.http.get(f"{_project(slug)}/issues/{number}", not_found="missing_issue")
        issue = as_dict(page.data, page.url)
        where = f"gitlab issue {page.url}"
        created = text(issue, "created_at", where)
        author = field(issue, "author.username", where, str)
        titles, bodies = [Revision(created, author, None)], [Revision(created, author, None)]
        for note in self._notes(slug, number):
            if not note.get("system"):
                continue
            said = text(note, "body", where)
            change = Revision(text(note, "created_at", where), _username(note.get("author")), None)
            if said.startswith("changed the description"):
                bodies.append(change)
            elif said.startswith("changed title"):
                titles.append(change)
        return EditHistory(
            labels=self._label_marks(slug, number, label),
            title=_with_current(titles, text(issue, "title", where)),
            body=_with_current(bodies, text(issue, "description", where)),
            attributed=True,
        )

    def _label_marks(self, slug: str, number: int, label: str) -> tuple[LabelMark, ...]:
        path = f"{_project(slug)}/issues/{number}/resource_label_events"
        events = self.http.collect(path, {"per_page": "100"}, next_page, not_found="missing_issue")
        marks = []
        for raw in events or []:
            event = as_dict(raw, path)
            named = event.get("label")
            is_label = isinstance(named, dict) and named.get("name") == label
            if event.get("action") == "add" and is_label:
                at = text(event, "created_at", path)
                marks.append(LabelMark(_username(event.get("user")), at))
        return tuple(sorted(marks, key=lambda mark: parse_time(mark.at)))

    def is_trusted(self, slug: str, actor: str) -> bool:
        if actor in self.settings.trusted_actors:
            return True
        if not self.settings.trust_write_permission:
            return False
        user_id = self._user_id(actor)
        if user_id is None:
            return False
        # One member, inherited or direct, by id: a list (even searched) pages, and the
        # labeller may be anywhere in it. 404: not a member.
        page = self.http.get_optional(f"{_project(slug)}/members/all/{user_id}")
        if page is None:
            return False
        level: int = field(as_dict(page.data, page.url), "access_level", page.url, int)
        return level >= DEVELOPER_ACCESS

    def _user_id(self, username: str) -> int | None:
        """``GET /users?username=``: the id of the user with exactly this (case-insensitive)
        username. Read each time: a username freed by a rename may be taken by someone else."""
        page = self.http.get("/users", {"username": username})
        for raw in as_list(page.data, page.url):
            user = as_dict(raw, page.url)
            if str(user.get("username", "")).lower() == username.lower():
                user_id: int = field(user, "id", page.url, int)
                return user_id
        return None

    def add_labels(self, slug: str, number: int, labels: Sequence[str]) -> None:
        body = {"add_labels": ",".join(labels)}
        self._update(slug, number, body)

    def remove_label(self, slug: str, number: int, label: str) -> None:
        body = {"remove_labels": label}
        self._update(slug, number, body)

    def comment(self, slug: str, number: int, body: str) -> str:
        path = f"{_project(slug)}/issues/{number}/notes"
        page = self.http.mutate("POST", path, {"body": body}, not_found="missing_issue")
        posted = as_dict(page.data, path)
        self.me.learn(posted.get("author"))
        return str(field(posted, "id", path, int))

    def edit_comment(self, slug: str, number: int, comment_id: str, body: str) -> None:
        """``PUT /projects/:id/issues/:issue_iid/notes/:note_id``."""
        path = f"{_project(slug)}/issues/{number}/notes/{int(comment_id)}"
        self.http.mutate("PUT", path, {"body": body}, not_found="missing_comment")

    def list_comments(self, slug: str, number: int) -> list[Comment]:
        path = f"{_project(slug)}/issues/{number}/notes"
        notes = self._notes(slug, number)
        return self.me.mark(parse_note(note, path) for note in notes if not note.get("system"))

    def _notes(self, slug: str, number: int) -> list[dict[str, Any]]:
        """Every note, system notes included, oldest first."""
        path = f"{_project(slug)}/issues/{number}/notes"
        params = {"sort": "asc", "order_by": "created_at", "per_page": "100"}
        notes = self.http.collect(path, params, next_page, not_found="missing_issue") or []
        return [as_dict(raw, path) for raw in notes]

    def close(self, slug: str, number: int, comment: str | None) -> None:
        if comment:
            self.comment(slug, number, comment)
        body = {"state_event": "close"}
        self._update(slug, number, body)

    def commit_ci_state(self, slug: str, sha: str) -> CiState:
        path = f"{_project(slug)}/pipelines"
        page = self.http.get(path, {"sha": sha, "order_by": "id", "sort": "desc"})
        pipelines = [as_dict(raw, path) for raw in as_list(page.data, path)]
        if not pipelines:
            return CiState("none")
        newest = max(pipelines, key=_pipeline_id)
        status = field(newest, "status", path, str)
        details = tuple(f"pipeline {p.get('id')}: {p.get('status')}" for p in pipelines)
        url = str(newest.get("web_url") or "")
        if status in FAILED:
            return CiState("failure", details, url)
        if status in PENDING:
            return CiState("pending", details, url)
        if status in CANCELLED:
            return CiState("cancelled", details, url)
        if status == "skipped":
            return CiState("none", details, url)
        return CiState("success", details, url)

    def open_pull_request(self, slug: str, head: str, base: str, title: str, body: str) -> str:
        """A merge request from ``head`` into ``base``, unless an open one exists."""
        path = f"{_project(slug)}/merge_requests"
        query = {"state": "opened", "source_branch": head, "target_branch": base}
        for raw in self.http.collect(path, query, next_page) or []:
            return text(as_dict(raw, path), "web_url", path)
        payload = {
            "source_branch": head,
            "target_branch": base,
            "title": title,
            "description": body,
        }
        page = self.http.mutate("POST", path, payload)
        return text(as_dict(page.data, page.url), "web_url", page.url)

    def close_client(self) -> None:
        self.http.close()

    def _update(self, slug: str, number: int, body: dict[str, str]) -> None:
        path = f"{_project(slug)}/issues/{number}"
        self.http.mutate("PUT", path, body, not_found="missing_issue")


def _project(slug: str) -> str:
    split_slug(slug)  # validates; nested groups are fine
    return f"/projects/{quote(slug, safe='')}"


def _username(user: Any) -> str | None:
    if isinstance(user, dict) and isinstance(user.get("username"), str):
        return str(user["username"])
    return None


def _with_current(revisions: list[Revision], current: str) -> tuple[Revision, ...]:
    """Oldest first; the newest revision's text is the current one, the others unknown."""
    ordered = sorted(revisions, key=lambda rev: parse_time(rev.at))
    last = ordered[-1]
    return (*ordered[:-1], Revision(last.at, last.editor, current))


def _pipeline_id(pipeline: dict[str, Any]) -> int:
    value = pipeline.get("id")
    return value if isinstance(value, int) else 0


def next_page(page: Page, params: Params) -> tuple[str, Params] | None:
    """``x-next-page`` (empty on the last page), else ``Link``."""
    following = page.headers.get("x-next-page")
    if following is not None:
        if not following.strip().isdigit():
            return None
        return page.url.split("?", 1)[0], {**params, "page": following.strip()}
    return link_next(page, params)


def parse_issue(item: dict[str, Any]) -> TrackerIssue:
    where = f"gitlab issue {item.get('web_url', '?')}"
    return TrackerIssue(
        number=field(item, "iid", where, int),
        title=text(item, "title", where),
        body=text(item, "description", where),
        author=field(item, "author.username", where, str),
        url=text(item, "web_url", where),
        labels=label_names(item, where),
        state=field(item, "state", where, str),
        updated_at=text(item, "updated_at", where),
        external_id=str(field(item, "id", where, int)),
    )


def parse_note(item: dict[str, Any], where: str) -> Comment:
    return Comment(
        author=field(item, "author.username", where, str),
        body=text(item, "body", where),
        created_at=text(item, "created_at", where),
        id=str(field(item, "id", where, int)),
    )
