"""A stateful fake of GitLab's REST API (``/api/v4``), the parts the pipeline uses.

Answers follow ``@gitbeaker/core``'s REST types and webhooks
``gitlab-event-types`` (checked by tests/integration/test_tracker_fake_shapes.py).
Projects are addressed by URL-encoded path; issues by ``iid``; lists page by
``page``/``per_page`` (default 20, cap 100) with ``x-next-page``, ``x-total``
and ``Link``; labels are strings changed by ``add_labels``/``remove_labels``;
label, title and description changes also appear as system notes, authored
by whoever made them, as on GitLab; rate-limit headers
are ``RateLimit-*`` and an exhausted limit answers 429 with ``Retry-After``.
"""

from __future__ import annotations

import email.utils
import re
import zlib
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from pipeline.testing.forges.base import FakeForge, Reply, json_response, page_bounds
from pipeline.testing.forges.model import FakeComment, FakeIssue

PROJECT = r"/projects/(?P<project>[^/]+)"
ISSUE = PROJECT + r"/issues/(?P<number>\d+)"
SITE = "https://gitlab.test"


class FakeGitLab(FakeForge):
    """GitLab on loopback, under ``/api/v4``."""

    forge = "gitlab"
    api_prefix = "/api/v4"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.route("GET", "/user", lambda _r, _m, _b: Reply(200, _user(self.bot)))
        self.route("GET", PROJECT + "/issues", self._list_issues)
        self.route("GET", ISSUE, self._get_issue)
        self.route("PUT", ISSUE, self._update_issue)
        self.route("GET", ISSUE + "/notes", self._list_notes)
        self.route("POST", ISSUE + "/notes", self._post_note)
        self.route("PUT", ISSUE + r"/notes/(?P<note>\d+)", self._edit_note)
        self.route("GET", ISSUE + "/resource_label_events", self._label_events)
        self.route("GET", PROJECT + "/members/all", self._members)
        self.route("GET", PROJECT + r"/members/all/(?P<user_id>\d+)", self._member)
        self.route("GET", "/users", self._users)
        self.route("GET", PROJECT + "/pipelines", self._pipelines)
        self.route("GET", PROJECT + "/merge_requests", self._list_merge_requests)
        self.route("POST", PROJECT + "/merge_requests", self._create_merge_request)

    def authorized(self, request: Request) -> bool:
        return (
            request.headers.get("private-token") == self.token
            or request.headers.get("authorization") == f"Bearer {self.token}"
        )

    def rate_headers(self) -> dict[str, str]:
        return {
            "RateLimit-Limit": str(self.rate_limit),
            "RateLimit-Observed": str(self.rate_used),
            "RateLimit-Remaining": str(max(0, self.rate_remaining)),
            "RateLimit-Reset": str(self.rate_reset),
            "RateLimit-ResetTime": email.utils.formatdate(self.rate_reset, usegmt=True),
        }

    def rate_exhausted(self) -> Response:
        headers = {**self.rate_headers(), "Retry-After": "60"}
        return json_response(429, {"message": "Retry later"}, headers)

    def labeled_webhook(self, slug: str, number: int, label: str, sender: str) -> dict[str, Any]:
        """An ``Issue Hook`` update payload whose ``changes.labels`` gained ``label``."""
        with self.lock:
            issue = self.issue(slug, number)
            current = [{"id": self.label_id(slug, n), "title": n} for n in issue.labels]
            previous = [entry for entry in current if entry["title"] != label]
            return {
                "object_kind": "issue",
                "user": _hook_user(sender),
                "project": {
                    "id": self.repos[slug].id,
                    "path_with_namespace": slug,
                    "web_url": f"{SITE}/{slug}",
                },
                "object_attributes": {
                    "id": issue.id,
                    "iid": number,
                    "title": issue.title,
                    "state": _state(issue),
                    "action": "update",
                    "url": f"{SITE}/{slug}/-/issues/{number}",
                },
                "labels": current,
                "changes": {"labels": {"previous": previous, "current": current}},
            }

    # -- shapes ------------------------------------------------------------

    def render_issue(self, slug: str, issue: FakeIssue) -> dict[str, Any]:
        return {
            "id": issue.id,
            "iid": issue.number,
            "project_id": self.repos[slug].id,
            "title": issue.title,
            "description": issue.body,
            "state": _state(issue),
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            **({"closed_at": issue.updated_at} if issue.state == "closed" else {}),
            "labels": list(issue.labels),
            "assignees": [],
            "author": _user(issue.author),
            "type": "ISSUE",
            "user_notes_count": len(issue.comments),
            "web_url": f"{SITE}/{slug}/-/issues/{issue.number}",
            "confidential": False,
            "references": {
                "short": f"#{issue.number}",
                "relative": f"#{issue.number}",
                "full": f"{slug}#{issue.number}",
            },
        }

    def _render_note(self, comment: FakeComment, issue: FakeIssue, slug: str) -> dict[str, Any]:
        return {
            "id": comment.id,
            "body": comment.body,
            "author": _user(comment.author),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at or comment.created_at,
            "system": comment.system,
            "noteable_id": issue.id,
            "noteable_type": "Issue",
            "noteable_iid": issue.number,
            "project_id": self.repos[slug].id,
        }

    # -- handlers ----------------------------------------------------------

    def _list_issues(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, query = _slug(m), request.query_params
        wanted = [x for x in query.get("labels", "").split(",") if x]
        state = query.get("state", "all")
        issues = [
            i
            for i in self.repos[slug].issues.values()
            if not i.is_pull_request
            and (state == "all" or _state(i) == state)
            and all(w in i.labels for w in wanted)
        ]
        issues.sort(key=lambda i: i.created_at, reverse=True)
        return self._paged(request, [self.render_issue(slug, i) for i in issues])

    def _get_issue(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        return Reply(200, self.render_issue(_slug(m), self._issue(m)))

    def _update_issue(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        slug, issue = _slug(m), self._issue(m)
        if not isinstance(body, dict):
            return Reply(400, {"message": "400 Bad request"})
        for name in _split(body.get("add_labels")):
            self.apply_label(slug, issue.number, name, self.bot)
        for name in _split(body.get("remove_labels")):
            self.unlabel(slug, issue.number, name, self.bot)
        if body.get("title") or body.get("description") is not None:
            self.edit_issue(
                slug, issue.number, self.bot, title=body.get("title"), body=body.get("description")
            )
        if body.get("state_event") in ("close", "reopen"):
            state = "closed" if body["state_event"] == "close" else "open"
            self.set_state(slug, issue.number, state)
        return Reply(200, self.render_issue(slug, issue))

    def _list_notes(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, issue = _slug(m), self._issue(m)
        system = [
            FakeComment(
                e.id,
                e.actor,
                f"{'added' if e.added else 'removed'} ~{e.label} label",
                e.created_at,
                system=True,
            )
            for e in issue.events
        ]
        system += [  # GitLab's wording (SystemNotes::IssuablesService), authored by the editor
            FakeComment(
                e.id,
                e.editor,
                "changed the description"
                if e.field == "body"
                else f"changed title from **{e.old}** to **{e.new}**",
                e.at,
                system=True,
            )
            for e in issue.edits
        ]
        notes = sorted(
            issue.comments + system,
            key=lambda c: c.created_at,
            reverse=request.query_params.get("sort", "desc") == "desc",
        )
        return self._paged(request, [self._render_note(n, issue, slug) for n in notes])

    def _post_note(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Reply(400, {"message": "400 Bad request - body is missing"})
        slug, issue = _slug(m), self._issue(m)
        note = self.add_comment(slug, issue.number, body["body"], self.bot)
        return Reply(201, self._render_note(note, issue, slug))

    def _edit_note(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Reply(400, {"message": "400 Bad request - body is missing"})
        slug, issue = _slug(m), self._issue(m)
        if not any(c.id == int(m["note"]) for c in issue.comments):
            return Reply(404, {"message": "404 Not found"})
        _, note = self.edit_comment(slug, int(m["note"]), body["body"])
        return Reply(200, self._render_note(note, issue, slug))

    def _label_events(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, issue = _slug(m), self._issue(m)
        items = [
            {
                "id": e.id,
                "user": _user(e.actor),
                "created_at": e.created_at,
                "resource_type": "Issue",
                "resource_id": issue.id,
                "label": {
                    "id": self.label_id(slug, e.label),
                    "name": e.label,
                    "color": "#ededed",
                    "description": None,
                },
                "action": "add" if e.added else "remove",
            }
            for e in issue.events
        ]
        return self._paged(request, items)

    def _members(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        query = request.query_params.get("query", "")
        members = [
            {**_user(user), "access_level": int(level)}
            for user, level in self.repos[_slug(m)].permissions.items()
            if query in user
        ]
        return self._paged(request, members)

    def _member(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        """``GET /projects/:id/members/all/:user_id``: one member (gitbeaker
        ``ProjectMembers.show`` with ``includeInherited``), 404 for a non-member."""
        for user, level in self.repos[_slug(m)].permissions.items():
            if _user(user)["id"] == int(m["user_id"]):
                return Reply(200, {**_user(user), "access_level": int(level)})
        return Reply(404, {"message": "404 Not found"})

    def _users(self, request: Request, _m: re.Match[str], _: Any) -> Reply:
        """``GET /users?username=``: the user with that username (case-insensitive), if any;
        here every name a repo, issue or permission mentions is a user."""
        wanted = request.query_params.get("username", "").lower()
        with self.lock:
            known = {self.bot}
            for repo in self.repos.values():
                known.update(repo.permissions)
                for issue in repo.issues.values():
                    known.add(issue.author)
                    known.update(e.actor for e in issue.events)
        found = [_user(name) for name in sorted(known) if name.lower() == wanted]
        return self._paged(request, found)

    def _pipelines(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        sha = request.query_params.get("sha")
        items: list[dict[str, Any]] = [
            {
                "id": p.id,
                "iid": p.id,
                "project_id": self.repos[_slug(m)].id,
                "sha": p.sha,
                "ref": "main",
                "status": p.status,
                "source": "push",
                "web_url": p.web_url,
                "created_at": p.created_at,
                "updated_at": p.created_at,
            }
            for p in self.repos[_slug(m)].pipelines
            if sha is None or p.sha == sha
        ]
        items.sort(key=lambda p: int(p["id"]), reverse=True)
        return self._paged(request, items)

    def render_merge_request(self, slug: str, pull: FakeIssue) -> dict[str, Any]:
        return {
            "id": pull.id,
            "iid": pull.number,
            "project_id": self.repos[slug].id,
            "title": pull.title,
            "description": pull.body,
            "state": _state(pull),
            "source_branch": pull.head,
            "target_branch": pull.base,
            "author": _user(pull.author),
            "created_at": pull.created_at,
            "updated_at": pull.updated_at,
            "web_url": f"{SITE}/{slug}/-/merge_requests/{pull.number}",
        }

    def _list_merge_requests(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, query = _slug(m), request.query_params
        pulls = self.pulls(slug, query.get("source_branch"), query.get("target_branch"))
        return self._paged(request, [self.render_merge_request(slug, p) for p in pulls])

    def _create_merge_request(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        slug = _slug(m)
        fields = ("title", "source_branch", "target_branch")
        if not isinstance(body, dict) or not all(isinstance(body.get(f), str) for f in fields):
            return Reply(
                400,
                {"message": "400 Bad request - title, source_branch, target_branch are missing"},
            )
        pull = self.open_pull(
            slug,
            body["source_branch"],
            body["target_branch"],
            body["title"],
            str(body.get("description") or ""),
            self.bot,
        )
        if pull is None:
            message = "Another open merge request already exists for this source branch"
            return Reply(409, {"message": [message]})
        return Reply(201, self.render_merge_request(slug, pull))

    def _issue(self, m: re.Match[str]) -> FakeIssue:
        issue = self.repos[_slug(m)].issues[int(m["number"])]
        if issue.is_pull_request:
            raise KeyError(m["number"])  # merge requests are not issues on GitLab
        return issue

    def _paged(self, request: Request, items: list[Any]) -> Reply:
        page, per_page = page_bounds(request, "per_page", 20, 100)
        pages = max(1, -(-len(items) // per_page))
        following = str(page + 1) if page < pages else ""
        headers = {
            "x-page": str(page),
            "x-per-page": str(per_page),
            "x-total": str(len(items)),
            "x-total-pages": str(pages),
            "x-next-page": following,
        }
        if following:
            url = request.url.include_query_params(page=following, per_page=per_page)
            headers["Link"] = f'<{url}>; rel="next"'
        return Reply(200, items[(page - 1) * per_page : page * per_page], headers)


def _slug(m: re.Match[str]) -> str:
    return unquote(m["project"])


def _state(issue: FakeIssue) -> str:
    return "opened" if issue.state == "open" else "closed"


def _split(value: object) -> list[str]:
    return [part.strip() for part in str(value or "").split(",") if part.strip()]


def _hook_user(username: str) -> dict[str, Any]:
    """A user as webhooks carry it (gitlab-event-types ``User``), not as the REST API does."""
    return {
        "id": zlib.crc32(username.encode()) % 10**6,
        "name": username,
        "username": username,
        "avatar_url": f"{SITE}/uploads/-/system/user/avatar/{username}.png",
    }


def _user(username: str) -> dict[str, Any]:
    return {
        "id": zlib.crc32(username.encode()) % 10**6,
        "username": username,
        "name": username,
        "state": "active",
        "web_url": f"{SITE}/{username}",
    }
