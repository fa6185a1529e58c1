"""A stateful fake of GitHub's REST API (the parts the pipeline uses).

Paths, pagination (``per_page`` default 30, cap 100, ``Link`` headers),
rate-limit headers (``x-ratelimit-*``; 403 when exhausted) and object shapes
follow GitHub's OpenAPI description as published in ``@octokit/openapi``;
``tests/fixtures/github`` holds the examples the shapes are checked against.
``POST /graphql`` (``/api/graphql`` on Enterprise) answers the one GraphQL
query the pipeline sends (``github_graphql``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from pipeline.testing.forges import github_graphql
from pipeline.testing.forges import github_shapes as shapes
from pipeline.testing.forges.base import FakeForge, Reply, json_response, page_bounds
from pipeline.testing.forges.model import FakeComment, FakeIssue

REPO = r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)"
ISSUE = REPO + r"/issues/(?P<number>\d+)"
SITE = "https://github.test"


class FakeGitHub(FakeForge):
    """GitHub on loopback; ``api_prefix="/api/v3"`` makes it look like GitHub Enterprise."""

    forge = "github"

    def __init__(self, *, api_prefix: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api_prefix = api_prefix
        self.route("GET", "/user", lambda _r, _m, _b: Reply(200, shapes.user(self.bot)))
        self.route("GET", REPO + "/issues", self._list_issues)
        self.route("GET", ISSUE, self._get_issue)
        self.route("PATCH", ISSUE, self._patch_issue)
        self.route("GET", ISSUE + "/comments", self._list_comments)
        self.route("POST", ISSUE + "/comments", self._post_comment)
        self.route("PATCH", REPO + r"/issues/comments/(?P<comment>\d+)", self._edit_comment)
        self.route("POST", ISSUE + "/labels", self._add_labels)
        self.route("DELETE", ISSUE + "/labels/(?P<label>[^/]+)", self._remove_label)
        self.route("GET", ISSUE + "/events", self._list_events)
        self.route("GET", REPO + "/labels", self._list_labels)
        self.route("GET", REPO + "/collaborators/(?P<user>[^/]+)/permission", self._permission)
        self.route("GET", REPO + "/commits/(?P<sha>[^/]+)/check-runs", self._check_runs)
        self.route("GET", REPO + "/commits/(?P<sha>[^/]+)/status", self._combined_status)
        self.route("GET", REPO + "/pulls", self._list_pulls)
        self.route("POST", REPO + "/pulls", self._create_pull)
        self.route("POST", "/graphql", lambda _r, _m, body: github_graphql.answer(self, body))

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        return header in (f"Bearer {self.token}", f"token {self.token}")

    def api_path(self, path: str) -> str | None:
        if self.api_prefix.endswith("/v3") and path == self.api_prefix[: -len("/v3")] + "/graphql":
            return "/graphql"  # Enterprise: REST under /api/v3, GraphQL at /api/graphql
        return super().api_path(path)

    def rate_headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": str(self.rate_limit),
            "x-ratelimit-remaining": str(max(0, self.rate_remaining)),
            "x-ratelimit-used": str(self.rate_used),
            "x-ratelimit-reset": str(self.rate_reset),
            "x-ratelimit-resource": "core",
        }

    def rate_exhausted(self) -> Response:
        message = {
            "message": "API rate limit exceeded for user.",
            "documentation_url": "https://docs.github.com/rest/rate-limit",
        }
        return json_response(403, message, self.rate_headers())

    def labeled_webhook(self, slug: str, number: int, label: str, sender: str) -> dict[str, Any]:
        """An ``issues`` event, action ``labeled``, for the issue as it is now."""
        with self.lock:
            issue = self.issue(slug, number)
            return {
                "action": "labeled",
                "issue": self.render_issue(slug, issue),
                "label": self.render_label(slug, label),
                "repository": self.render_repo(slug),
                "sender": shapes.user(sender),
            }

    # -- shapes ------------------------------------------------------------

    def render_repo(self, slug: str) -> dict[str, Any]:
        repo = self.repos[slug]
        owner, name = slug.split("/", 1)
        return {
            "id": repo.id,
            "node_id": shapes.node_id("Repository", repo.id),
            "name": name,
            "full_name": slug,
            "owner": shapes.user(owner),
            "private": False,
            "html_url": f"{SITE}/{slug}",
            "url": f"{self._api()}/repos/{slug}",
        }

    def render_label(self, slug: str, name: str) -> dict[str, Any]:
        label_id = self.label_id(slug, name)
        return {
            "id": label_id,
            "node_id": shapes.node_id("Label", label_id),
            "url": f"{self._api()}/repos/{slug}/labels/{name}",
            "name": name,
            "description": None,
            "color": "ededed",
            "default": False,
        }

    def render_issue(self, slug: str, issue: FakeIssue) -> dict[str, Any]:
        api = f"{self._api()}/repos/{slug}/issues/{issue.number}"
        data: dict[str, Any] = {
            "id": issue.id,
            "node_id": shapes.node_id("Issue", issue.id),
            "url": api,
            "repository_url": f"{self._api()}/repos/{slug}",
            "labels_url": api + "/labels{/name}",
            "comments_url": api + "/comments",
            "events_url": api + "/events",
            "html_url": f"{SITE}/{slug}/issues/{issue.number}",
            "number": issue.number,
            "state": issue.state,
            "title": issue.title,
            "body": issue.body or None,
            "user": shapes.user(issue.author),
            "pinned_comment": None,
            "labels": [self.render_label(slug, name) for name in issue.labels],
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "locked": False,
            "active_lock_reason": None,
            "comments": len(issue.comments),
            "closed_at": issue.updated_at if issue.state == "closed" else None,
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_by": None,
            "author_association": "NONE",
            "state_reason": "completed" if issue.state == "closed" else None,
        }
        if issue.is_pull_request:
            pull = f"{SITE}/{slug}/pull/{issue.number}"
            data["pull_request"] = {
                "url": f"{self._api()}/repos/{slug}/pulls/{issue.number}",
                "html_url": pull,
                "diff_url": pull + ".diff",
                "patch_url": pull + ".patch",
            }
        return data

    def _render_comment(self, slug: str, number: int, comment: FakeComment) -> dict[str, Any]:
        api = f"{self._api()}/repos/{slug}/issues"
        return {
            "id": comment.id,
            "node_id": shapes.node_id("IssueComment", comment.id),
            "url": f"{api}/comments/{comment.id}",
            "html_url": f"{SITE}/{slug}/issues/{number}#issuecomment-{comment.id}",
            "body": comment.body,
            "user": shapes.user(comment.author),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at or comment.created_at,
            "issue_url": f"{api}/{number}",
            "author_association": "NONE",
            "minimized": None,
        }

    def _api(self) -> str:
        return (self.served.url if self.served else "http://github.invalid") + self.api_prefix

    # -- handlers ----------------------------------------------------------

    def _list_issues(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug = _slug(m)
        wanted = [x for x in request.query_params.get("labels", "").split(",") if x]
        state = request.query_params.get("state", "open")
        issues = [
            i
            for i in self.repos[slug].issues.values()
            if (state == "all" or i.state == state) and all(w in i.labels for w in wanted)
        ]
        issues.sort(key=lambda i: i.number, reverse=True)  # GitHub: newest first
        return self._paged(request, [self.render_issue(slug, i) for i in issues])

    def _get_issue(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        return Reply(200, self.render_issue(_slug(m), self._issue(m)))

    def _patch_issue(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        issue = self._issue(m)
        if isinstance(body, dict) and body.get("state") in ("open", "closed"):
            self.set_state(_slug(m), issue.number, body["state"])
        if isinstance(body, dict) and (body.get("title") or body.get("body") is not None):
            self.edit_issue(
                _slug(m), issue.number, self.bot, title=body.get("title"), body=body.get("body")
            )
        return Reply(200, self.render_issue(_slug(m), issue))

    def _list_comments(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        issue = self._issue(m)
        items = [self._render_comment(_slug(m), issue.number, c) for c in issue.comments]
        return self._paged(request, items)

    def _post_comment(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Reply(422, {"message": "Validation Failed"})
        comment = self.add_comment(_slug(m), self._issue(m).number, body["body"], self.bot)
        return Reply(201, self._render_comment(_slug(m), self._issue(m).number, comment))

    def _edit_comment(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Reply(422, {"message": "Validation Failed"})
        issue, comment = self.edit_comment(_slug(m), int(m["comment"]), body["body"])
        return Reply(200, self._render_comment(_slug(m), issue.number, comment))

    def _add_labels(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        names = body.get("labels") if isinstance(body, dict) else body
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return Reply(422, {"message": "Validation Failed"})
        issue = self._issue(m)
        for name in names:
            self.apply_label(_slug(m), issue.number, name, self.bot)
        return Reply(200, [self.render_label(_slug(m), n) for n in issue.labels])

    def _remove_label(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        issue = self._issue(m)
        if not self.unlabel(_slug(m), issue.number, unquote(m["label"]), self.bot):
            return Reply(404, {"message": "Label does not exist"})
        return Reply(200, [self.render_label(_slug(m), n) for n in issue.labels])

    def _list_events(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, issue = _slug(m), self._issue(m)
        items = [
            {
                "id": e.id,
                "node_id": shapes.node_id("LabeledEvent", e.id),
                "url": f"{self._api()}/repos/{slug}/issues/events/{e.id}",
                "actor": shapes.user(e.actor),
                "event": "labeled" if e.added else "unlabeled",
                "commit_id": None,
                "commit_url": None,
                "created_at": e.created_at,
                "performed_via_github_app": None,
                "label": {"name": e.label, "color": "ededed"},
            }
            for e in issue.events
        ]
        items += [
            {
                "id": e.id,
                "node_id": shapes.node_id("RenamedTitleEvent", e.id),
                "url": f"{self._api()}/repos/{slug}/issues/events/{e.id}",
                "actor": shapes.user(e.editor),
                "event": "renamed",
                "commit_id": None,
                "commit_url": None,
                "created_at": e.at,
                "performed_via_github_app": None,
                "rename": {"from": e.old, "to": e.new},
            }
            for e in issue.edits
            if e.field == "title"
        ]
        items.sort(key=lambda item: (item["created_at"], item["id"]))
        return self._paged(request, items)

    def _list_labels(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug = _slug(m)
        return self._paged(request, [self.render_label(slug, n) for n in self.repos[slug].labels])

    def _permission(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        permission = self.repos[_slug(m)].permissions.get(unquote(m["user"]), "none")
        role = {"none": "none", "read": "read"}.get(permission, permission)
        legacy = "write" if permission in ("maintain", "write") else permission
        return Reply(200, {"permission": legacy, "role_name": role, "user": shapes.user(m["user"])})

    def _check_runs(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        runs = self.repos[_slug(m)].check_runs.get(m["sha"], [])
        return Reply(
            200,
            {"total_count": len(runs), "check_runs": [shapes.check_run(r, m["sha"]) for r in runs]},
        )

    def _combined_status(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        slug, sha = _slug(m), m["sha"]
        statuses = self.repos[slug].statuses.get(sha, [])
        return Reply(
            200,
            {
                "state": shapes.combined_state(statuses),
                "sha": sha,
                "statuses": [shapes.status(s, i) for i, s in enumerate(statuses, 1)],
                "total_count": len(statuses),
                "repository": self.render_repo(slug),
                "commit_url": f"{self._api()}/repos/{slug}/commits/{sha}",
                "url": f"{self._api()}/repos/{slug}/commits/{sha}/status",
            },
        )

    def render_pull(self, slug: str, pull: FakeIssue) -> dict[str, Any]:
        owner = slug.split("/", 1)[0]
        return {
            "id": pull.id,
            "node_id": shapes.node_id("PullRequest", pull.id),
            "url": f"{self._api()}/repos/{slug}/pulls/{pull.number}",
            "html_url": f"{SITE}/{slug}/pull/{pull.number}",
            "number": pull.number,
            "state": pull.state,
            "locked": False,
            "title": pull.title,
            "body": pull.body or None,
            "user": shapes.user(pull.author),
            "draft": False,
            "created_at": pull.created_at,
            "updated_at": pull.updated_at,
            "head": {"label": f"{owner}:{pull.head}", "ref": pull.head},
            "base": {"label": f"{owner}:{pull.base}", "ref": pull.base},
        }

    def _list_pulls(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, query = _slug(m), request.query_params
        head = query.get("head", "").split(":", 1)[-1] or None
        pulls = self.pulls(slug, head, query.get("base") or None)
        return self._paged(request, [self.render_pull(slug, p) for p in pulls])

    def _create_pull(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        slug = _slug(m)
        fields = ("title", "head", "base")
        if not isinstance(body, dict) or not all(isinstance(body.get(f), str) for f in fields):
            return Reply(422, {"message": "Validation Failed"})
        pull = self.open_pull(
            slug, body["head"], body["base"], body["title"], str(body.get("body") or ""), self.bot
        )
        if pull is None:
            message = f"A pull request already exists for {slug.split('/')[0]}:{body['head']}."
            return Reply(422, {"message": "Validation Failed", "errors": [{"message": message}]})
        return Reply(201, self.render_pull(slug, pull))

    def _issue(self, m: re.Match[str]) -> FakeIssue:
        return self.repos[_slug(m)].issues[int(m["number"])]

    def _paged(self, request: Request, items: list[Any]) -> Reply:
        page, per_page = page_bounds(request, "per_page", 30, 100)
        last = max(1, -(-len(items) // per_page))
        links = []
        for rel, target in (("next", page + 1), ("last", last)):
            if page < last:
                url = request.url.include_query_params(page=target, per_page=per_page)
                links.append(f'<{url}>; rel="{rel}"')
        headers = {"Link": ", ".join(links)} if links else {}
        return Reply(200, items[(page - 1) * per_page : page * per_page], headers)


def _slug(m: re.Match[str]) -> str:
    return f"{m['owner']}/{m['name']}"
