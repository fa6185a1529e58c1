"""GitHub (and GitHub Enterprise Server) over the REST API, version 2022-11-28.

Paths and shapes follow GitHub's OpenAPI description (``@octokit/openapi``):
issues are listed with ``labels=<ready>&state=open&per_page=100`` and paged by
``Link``; the issues endpoint also returns pull requests, recognisable by a
``pull_request`` key, which are dropped. The labeller comes from the issue's
``labeled`` events; trust can come from write permission on the repo. Who
edited the title and body comes from ``github_history`` (events and GraphQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx

from pipeline.config.settings import TrackerSettings
from pipeline.core.errors import ConfigError, FatalError
from pipeline.trackers.base import (
    CiState,
    Comment,
    EditHistory,
    IssueDetail,
    LabelMark,
    TrackerIssue,
    as_dict,
    field,
    label_names,
    split_slug,
    text,
)
from pipeline.trackers.github_history import (
    body_revisions,
    fetch_issue_edits,
    graphql_url,
    label_marks,
    title_revisions,
)
from pipeline.trackers.http import ForgeHttp, HttpOptions, link_next
from pipeline.trackers.identity import TokenUser, permission_trusted
from pipeline.trackers.token import TokenHeader

GITHUB_API = "https://api.github.com"
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})
FAILED_CONCLUSIONS = frozenset(
    {"failure", "timed_out", "action_required", "startup_failure", "stale"}
)
# A check cancelled (``concurrency: cancel-in-progress`` when a newer push came) said nothing.
CANCELLED_CONCLUSIONS = frozenset({"cancelled"})
# Check-run conclusions (octokit openapi ``check-run.conclusion``); any other is no verdict.
OK_CONCLUSIONS = frozenset({"success", "neutral", "skipped"})
KNOWN_CONCLUSIONS = OK_CONCLUSIONS | FAILED_CONCLUSIONS | CANCELLED_CONCLUSIONS


class GitHubTracker:
    """The ``Tracker`` for github.com or a GitHub Enterprise ``.../api/v3`` base URL."""

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
        self.graphql_url = graphql_url(settings.base_url or GITHUB_API)
        self.http = ForgeHttp(
            "github",
            settings.base_url or GITHUB_API,
            {
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            },
            auth=TokenHeader("Authorization", "Bearer {}", token, settings.token),
            options=options,
            transport=transport,
        )
        self.me = TokenUser(self.http, "/user", "login")

    def __repr__(self) -> str:
        return f"GitHubTracker(name={self.name!r}, http={self.http!r})"

    def list_ready(self, slug: str) -> list[TrackerIssue] | None:
        params = {"labels": self.settings.ready_label, "state": "open", "per_page": "100"}
        items = self.http.collect(f"{_repo(slug)}/issues", params, link_next, conditional=True)
        if items is None:
            return None
        issues = [parse_issue(as_dict(item, f"github list {slug}")) for item in items]
        return sorted((i for i in issues if not i.is_pull_request), key=lambda i: i.number)

    def get_issue(self, slug: str, number: int) -> IssueDetail:
        issue = self.issue(slug, number)
        comments = tuple(self.list_comments(slug, number))
        return IssueDetail(**vars(issue), comments=comments)

    def issue(self, slug: str, number: int) -> TrackerIssue:
        page = self.http.get(f"{_repo(slug)}/issues/{number}", not_found="missing_issue")
        return parse_issue(as_dict(page.data, page.url))

    def labeller(self, slug: str, number: int, label: str) -> str | None:
        mark = self.label_event(slug, number, label)
        return mark.actor if mark else None

    def label_event(self, slug: str, number: int, label: str) -> LabelMark | None:
        path = f"{_repo(slug)}/issues/{number}/events"
        marks = label_marks(self._events(slug, number), label, path)
        return marks[-1] if marks else None

    def edit_history(self, slug: str, number: int, label: str) -> EditHistory:
        path = f"{_repo(slug)}/issues/{number}/events"
        owner, name = split_slug(slug)
        # The title first, its renames after: a rename made between the two reads is then
        # listed (and weighed) instead of passing for the title as opened or as labelled.
        issue, nodes = fetch_issue_edits(self.http, self.graphql_url, owner, name, number)
        events = self._events(slug, number)
        return EditHistory(
            labels=label_marks(events, label, path),
            title=title_revisions(events, issue, path),
            body=body_revisions(issue, nodes, self.graphql_url),
            attributed=True,
        )

    def _events(self, slug: str, number: int) -> list[Any]:
        path = f"{_repo(slug)}/issues/{number}/events"
        return self.http.collect(path, {"per_page": "100"}, link_next) or []

    def is_trusted(self, slug: str, actor: str) -> bool:
        return permission_trusted(self.http, self.settings, _repo(slug), actor, WRITE_PERMISSIONS)

    def add_labels(self, slug: str, number: int, labels: Sequence[str]) -> None:
        path = f"{_repo(slug)}/issues/{number}/labels"
        self.http.mutate("POST", path, {"labels": list(labels)}, not_found="missing_issue")

    def remove_label(self, slug: str, number: int, label: str) -> None:
        path = f"{_repo(slug)}/issues/{number}/labels/{quote(label, safe='')}"
        try:
            self.http.mutate("DELETE", path, not_found="missing_label")
        except FatalError as exc:  # 404: the label was not on the issue, which is the goal
            if exc.kind != "missing_label":
                raise

    def comment(self, slug: str, number: int, body: str) -> str:
        path = f"{_repo(slug)}/issues/{number}/comments"
        page = self.http.mutate("POST", path, {"body": body}, not_found="missing_issue")
        posted = as_dict(page.data, path)
        self.me.learn(posted.get("user"))
        return str(field(posted, "id", path, int))

    def edit_comment(self, slug: str, number: int, comment_id: str, body: str) -> None:
        """``PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}``."""
        path = f"{_repo(slug)}/issues/comments/{int(comment_id)}"
        self.http.mutate("PATCH", path, {"body": body}, not_found="missing_comment")

    def list_comments(self, slug: str, number: int) -> list[Comment]:
        path = f"{_repo(slug)}/issues/{number}/comments"
        items = self.http.collect(path, {"per_page": "100"}, link_next, not_found="missing_issue")
        return self.me.mark(parse_comment(as_dict(item, path), path) for item in items or [])

    def close(self, slug: str, number: int, comment: str | None) -> None:
        if comment:
            self.comment(slug, number, comment)
        body = {"state": "closed", "state_reason": "completed"}
        self.http.mutate("PATCH", f"{_repo(slug)}/issues/{number}", body, not_found="missing_issue")

    def commit_ci_state(self, slug: str, sha: str) -> CiState:
        """Check runs and the combined commit status, summed (both are in use)."""
        runs_path = f"{_repo(slug)}/commits/{sha}/check-runs"
        runs_page = self.http.get(runs_path, {"per_page": "100"}, not_found="missing_commit")
        runs = field(as_dict(runs_page.data, runs_path), "check_runs", runs_path, list)
        status_path = f"{_repo(slug)}/commits/{sha}/status"
        status_page = self.http.get(status_path, {"per_page": "100"}, not_found="missing_commit")
        statuses = field(as_dict(status_page.data, status_path), "statuses", status_path, list)
        return summarise_ci(runs, statuses, runs_path)

    def open_pull_request(self, slug: str, head: str, base: str, title: str, body: str) -> str:
        """``POST /repos/{owner}/{repo}/pulls``, unless an open one for ``head`` exists."""
        owner, _ = split_slug(slug)
        path = f"{_repo(slug)}/pulls"
        query = {"state": "open", "head": f"{owner}:{head}", "base": base, "per_page": "100"}
        for item in self.http.collect(path, query, link_next) or []:
            return text(as_dict(item, path), "html_url", path)
        payload = {"title": title, "head": head, "base": base, "body": body}
        page = self.http.mutate("POST", path, payload)
        return text(as_dict(page.data, page.url), "html_url", page.url)

    def close_client(self) -> None:
        self.http.close()


def _repo(slug: str) -> str:
    owner, name = split_slug(slug)
    if "/" in owner:
        raise ConfigError(f"repo slug {slug!r}: GitHub slugs are owner/name")
    return f"/repos/{owner}/{name}"


def parse_issue(item: dict[str, Any]) -> TrackerIssue:
    """A REST issue object into the neutral ``TrackerIssue``."""
    where = f"github issue {item.get('url', '?')}"
    return TrackerIssue(
        number=field(item, "number", where, int),
        title=text(item, "title", where),
        body=text(item, "body", where),
        author=field(item, "user.login", where, str),
        url=text(item, "html_url", where),
        labels=label_names(item, where),
        state=field(item, "state", where, str),
        updated_at=text(item, "updated_at", where),
        external_id=str(field(item, "id", where, int)),
        is_pull_request="pull_request" in item,
    )


def parse_comment(item: dict[str, Any], where: str) -> Comment:
    return Comment(
        author=field(item, "user.login", where, str),
        body=text(item, "body", where),
        created_at=text(item, "created_at", where),
        id=str(field(item, "id", where, int)),
    )


def _latest_by_name(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One check run per name, the newest (highest id): a re-run supersedes the first."""
    newest: dict[str, dict[str, Any]] = {}
    for run in runs:
        name = str(run.get("name"))
        if name not in newest or int(run.get("id") or 0) > int(newest[name].get("id") or 0):
            newest[name] = run
    return list(newest.values())


def summarise_ci(runs: list[Any], statuses: list[Any], where: str) -> CiState:
    """GitHub's check runs and commit statuses for one commit, judged together.

    Failure beats pending beats cancelled beats success; nothing at all is ``none``.
    A conclusion or state this judge does not know is no verdict (pending), never green.
    Of the check runs with one name only the newest counts (a re-run supersedes).
    """
    details: list[str] = []
    failed: list[str] = []
    pending = cancelled = False
    for run in _latest_by_name([as_dict(r, where) for r in runs]):
        name, status, conclusion = run.get("name"), run.get("status"), run.get("conclusion")
        details.append(f"check {name}: {conclusion or status}")
        if status != "completed" or conclusion not in KNOWN_CONCLUSIONS:
            pending = True
        elif conclusion in FAILED_CONCLUSIONS:  # GitHub's own page first, then the app's
            failed.append(str(run.get("html_url") or run.get("details_url") or ""))
        elif conclusion in CANCELLED_CONCLUSIONS:
            cancelled = True
    for status_item in (as_dict(s, where) for s in statuses):
        state = status_item.get("state")
        details.append(f"status {status_item.get('context')}: {state}")
        if state in ("failure", "error"):
            failed.append(str(status_item.get("target_url") or ""))
        elif state != "success":
            pending = True
    if not details:
        return CiState("none")
    if failed:
        return CiState("failure", tuple(details), next((url for url in failed if url), ""))
    if pending:
        return CiState("pending", tuple(details))
    return CiState("cancelled" if cancelled else "success", tuple(details))
