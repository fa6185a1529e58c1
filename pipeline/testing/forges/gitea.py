"""A stateful fake of the Gitea/Forgejo API (``/api/v1``), the parts the pipeline uses.

Follows Gitea's swagger description as the ``gitea-js`` package ships it (the
shape tests check every answer against those types): ``page``/``limit`` paging capped at
``max_response_items`` (reported by ``GET /settings/api``) with
``X-Total-Count`` and ``Link``; labels set by id; ``type=issues`` filtering;
timeline ``label`` entries with ``body`` ``"1"`` (added) or ``""`` (removed);
per-context commit statuses under ``status``. Gitea sends no rate-limit
headers; the fake still counts requests in ``rate_used`` for tests.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from starlette.requests import Request

from pipeline.testing.forges.base import FakeForge, Reply, page_bounds
from pipeline.testing.forges.model import FakeComment, FakeIssue

REPO = r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)"
ISSUE = REPO + r"/issues/(?P<number>\d+)"
SITE = "https://gitea.test"


class FakeGitea(FakeForge):
    """Gitea (or Forgejo) on loopback, under ``/api/v1``."""

    forge = "gitea"
    api_prefix = "/api/v1"

    def __init__(self, *, max_items: int = 50, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_items = max_items
        self.route("GET", "/settings/api", self._settings)
        self.route("GET", "/user", lambda _r, _m, _b: Reply(200, _user(self.bot)))
        self.route("GET", REPO + "/issues", self._list_issues)
        self.route("GET", ISSUE, self._get_issue)
        self.route("PATCH", ISSUE, self._patch_issue)
        self.route("GET", ISSUE + "/comments", self._list_comments)
        self.route("POST", ISSUE + "/comments", self._post_comment)
        self.route("PATCH", REPO + r"/issues/comments/(?P<comment>\d+)", self._edit_comment)
        self.route("POST", ISSUE + "/labels", self._add_labels)
        self.route("DELETE", ISSUE + r"/labels/(?P<label_id>\d+)", self._remove_label)
        self.route("GET", ISSUE + "/timeline", self._timeline)
        self.route("GET", REPO + "/labels", self._list_labels)
        self.route("POST", REPO + "/labels", self._create_label)
        self.route("GET", REPO + "/collaborators/(?P<user>[^/]+)/permission", self._permission)
        self.route("GET", REPO + "/commits/(?P<sha>[^/]+)/status", self._combined_status)
        self.route("GET", REPO + "/pulls", self._list_pulls)
        self.route("POST", REPO + "/pulls", self._create_pull)

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        return header in (f"token {self.token}", f"Bearer {self.token}")

    def labeled_webhook(self, slug: str, number: int, sender: str) -> dict[str, Any]:
        """An ``issues`` ``label_updated`` payload (Gitea does not name the added label)."""
        with self.lock:
            issue = self.issue(slug, number)
            return {
                "action": "label_updated",
                "number": number,
                "issue": self.render_issue(slug, issue),
                "repository": self.render_repo(slug),
                "sender": _user(sender),
            }

    # -- shapes ------------------------------------------------------------

    def render_repo(self, slug: str) -> dict[str, Any]:
        owner, name = slug.split("/", 1)
        return {
            "id": self.repos[slug].id,
            "owner": _user(owner),
            "name": name,
            "full_name": slug,
            "html_url": f"{SITE}/{slug}",
        }

    def render_label(self, slug: str, name: str) -> dict[str, Any]:
        return {
            "id": self.label_id(slug, name),
            "name": name,
            "color": "ededed",
            "description": "",
            "exclusive": False,
            "is_archived": False,
            "url": f"{SITE}/api/v1/repos/{slug}/labels/{self.label_id(slug, name)}",
        }

    def render_issue(self, slug: str, issue: FakeIssue) -> dict[str, Any]:
        kind = "pulls" if issue.is_pull_request else "issues"
        html = f"{SITE}/{slug}/{kind}/{issue.number}"
        pull = {"merged": False, "merged_at": None, "html_url": html}
        return {
            "id": issue.id,
            "url": f"{SITE}/api/v1/repos/{slug}/issues/{issue.number}",
            "html_url": html,
            "number": issue.number,
            "user": _user(issue.author),
            "original_author": "",
            "original_author_id": 0,
            "title": issue.title,
            "body": issue.body,
            "ref": "",
            "labels": [self.render_label(slug, name) for name in issue.labels],
            "milestone": None,
            "assignee": None,
            "assignees": None,
            "state": issue.state,
            "is_locked": False,
            "comments": len(issue.comments),
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.updated_at if issue.state == "closed" else None,
            "due_date": None,
            "pull_request": pull if issue.is_pull_request else None,
            "repository": _repo_meta(self.repos[slug].id, slug),  # RepositoryMeta, not Repository
        }

    def _render_comment(self, slug: str, number: int, comment: FakeComment) -> dict[str, Any]:
        return {
            "id": comment.id,
            "html_url": f"{SITE}/{slug}/issues/{number}#{comment.id}",
            "issue_url": f"{SITE}/{slug}/issues/{number}",
            "user": _user(comment.author),
            "original_author": "",
            "body": comment.body,
            "created_at": comment.created_at,
            "updated_at": comment.updated_at or comment.created_at,
        }

    # -- handlers ----------------------------------------------------------

    def _settings(self, _r: Request, _m: re.Match[str], _: Any) -> Reply:
        return Reply(
            200,
            {
                "max_response_items": self.max_items,
                "default_paging_num": 30,
                "default_git_trees_per_page": 1000,
                "default_max_blob_size": 10485760,
            },
        )

    def _list_issues(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, query = _slug(m), request.query_params
        wanted = [x for x in query.get("labels", "").split(",") if x]
        state, kind = query.get("state", "open"), query.get("type")
        issues = [
            i
            for i in self.repos[slug].issues.values()
            if (state == "all" or i.state == state)
            and all(w in i.labels for w in wanted)
            and (kind is None or (kind == "pulls") == i.is_pull_request)
        ]
        issues.sort(key=lambda i: i.number, reverse=True)
        return self._paged(request, [self.render_issue(slug, i) for i in issues])

    def _get_issue(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        return Reply(200, self.render_issue(_slug(m), self._issue(m)))

    def _patch_issue(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        issue = self._issue(m)
        if isinstance(body, dict) and body.get("state") in ("open", "closed"):
            self.set_state(_slug(m), issue.number, body["state"])
        return Reply(201, self.render_issue(_slug(m), issue))

    def _list_comments(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        issue = self._issue(m)
        return Reply(200, [self._render_comment(_slug(m), issue.number, c) for c in issue.comments])

    def _post_comment(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Reply(422, {"message": "body is required"})
        issue = self._issue(m)
        comment = self.add_comment(_slug(m), issue.number, body["body"], self.bot)
        return Reply(201, self._render_comment(_slug(m), issue.number, comment))

    def _edit_comment(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Reply(422, {"message": "body is required"})
        issue, comment = self.edit_comment(_slug(m), int(m["comment"]), body["body"])
        return Reply(200, self._render_comment(_slug(m), issue.number, comment))

    def _add_labels(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        """Gitea's ``AddIssueLabels``: ids it does not know (a deleted label's) are dropped
        without a word (``GetLabelsByIDs`` finds only existing ones); the answer is the
        issue's labels."""
        slug, issue = _slug(m), self._issue(m)
        ids = body.get("labels") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            return Reply(422, {"message": "labels must be a list of label ids"})
        by_id = {label_id: name for name, label_id in self.repos[slug].labels.items()}
        for label_id in ids:
            if label_id in by_id:
                self.apply_label(slug, issue.number, by_id[label_id], self.bot)
        return Reply(200, [self.render_label(slug, n) for n in issue.labels])

    def _remove_label(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        """Gitea's ``DeleteIssueLabel``: an unknown label id is 422 (``IsErrLabelNotExist``)."""
        slug, issue = _slug(m), self._issue(m)
        by_id = {label_id: name for name, label_id in self.repos[slug].labels.items()}
        name = by_id.get(int(m["label_id"]))
        if name is None:
            return Reply(422, {"message": "label does not exist"})
        self.unlabel(slug, issue.number, name, self.bot)
        return Reply(204, None)

    def _timeline(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug, issue = _slug(m), self._issue(m)
        entries = [
            {
                "id": e.id,
                "type": "label",
                "body": "1" if e.added else "",
                "user": _user(e.actor),
                "label": self.render_label(slug, e.label),
                "created_at": e.created_at,
            }
            for e in issue.events
        ] + [
            {
                "id": c.id,
                "type": "comment",
                "body": c.body,
                "user": _user(c.author),
                "label": None,
                "created_at": c.created_at,
            }
            for c in issue.comments
        ]
        entries.sort(key=lambda e: str(e["created_at"]))
        return self._paged(request, entries)

    def _list_labels(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug = _slug(m)
        return self._paged(request, [self.render_label(slug, n) for n in self.repos[slug].labels])

    def _create_label(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        slug = _slug(m)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return Reply(422, {"message": "name is required"})
        if body["name"] in self.repos[slug].labels:
            return Reply(409, {"message": "label already exists"})
        return Reply(201, self.render_label(slug, body["name"]))

    def _permission(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        permission = self.repos[_slug(m)].permissions.get(m["user"])
        if permission is None:
            return Reply(404, {"message": f"{m['user']} is not a collaborator"})
        return Reply(
            200, {"permission": permission, "role_name": permission, "user": _user(m["user"])}
        )

    def _combined_status(self, _r: Request, m: re.Match[str], _: Any) -> Reply:
        slug, sha = _slug(m), m["sha"]
        statuses = self.repos[slug].statuses.get(sha, [])
        states = {s.state for s in statuses}
        combined = next((s for s in ("error", "failure", "pending") if s in states), "success")
        items = [
            {
                "id": n,
                "status": s.state,
                "target_url": s.target_url,
                "context": s.context,
                "description": s.description,
                "created_at": None,
                "updated_at": None,
                "creator": _user("ci"),
            }
            for n, s in enumerate(statuses, 1)
        ]
        return Reply(
            200,
            {
                "state": combined if statuses else "",
                "sha": sha,
                "total_count": len(items),
                "statuses": items,
                "repository": self.render_repo(slug),
                "commit_url": "",
                "url": "",
            },
        )

    def render_pull(self, slug: str, pull: FakeIssue) -> dict[str, Any]:
        return {
            "id": pull.id,
            "number": pull.number,
            "state": pull.state,
            "title": pull.title,
            "body": pull.body,
            "user": _user(pull.author),
            "html_url": f"{SITE}/{slug}/pulls/{pull.number}",
            "url": f"{SITE}/api/v1/repos/{slug}/pulls/{pull.number}",
            "head": {"ref": pull.head, "label": pull.head},
            "base": {"ref": pull.base, "label": pull.base},
            "merged": False,
            "created_at": pull.created_at,
            "updated_at": pull.updated_at,
        }

    def _list_pulls(self, request: Request, m: re.Match[str], _: Any) -> Reply:
        slug = _slug(m)
        return self._paged(request, [self.render_pull(slug, p) for p in self.pulls(slug)])

    def _create_pull(self, _r: Request, m: re.Match[str], body: Any) -> Reply:
        slug = _slug(m)
        fields = ("title", "head", "base")
        if not isinstance(body, dict) or not all(isinstance(body.get(f), str) for f in fields):
            return Reply(422, {"message": "title, head and base are required"})
        pull = self.open_pull(
            slug, body["head"], body["base"], body["title"], str(body.get("body") or ""), self.bot
        )
        if pull is None:
            return Reply(409, {"message": "pull request already exists for these targets"})
        return Reply(201, self.render_pull(slug, pull))

    def _issue(self, m: re.Match[str]) -> FakeIssue:
        return self.repos[_slug(m)].issues[int(m["number"])]

    def _paged(self, request: Request, items: list[Any]) -> Reply:
        page, limit = page_bounds(request, "limit", 30, self.max_items)
        headers = {"X-Total-Count": str(len(items))}
        if page * limit < len(items):
            url = request.url.include_query_params(page=page + 1, limit=limit)
            headers["Link"] = f'<{url}>; rel="next"'
        return Reply(200, items[(page - 1) * limit : page * limit], headers)


def _slug(m: re.Match[str]) -> str:
    return f"{m['owner']}/{m['name']}"


def _repo_meta(repo_id: int, slug: str) -> dict[str, Any]:
    owner, name = slug.split("/", 1)
    return {"id": repo_id, "name": name, "owner": owner, "full_name": slug}


def _user(login: str) -> dict[str, Any]:
    return {
        "id": zlib.crc32(login.encode()) % 10**6,
        "login": login,
        "full_name": "",
        "email": f"{login}@noreply.gitea.test",
    }
