"""The fake GitHub's GraphQL endpoint: the one query the pipeline sends.

It answers ``pipeline.trackers.github_history.EDITS_QUERY`` (recognised by its
``userContentEdits`` selection) with exactly the fields that query selects;
``tests/integration/test_tracker_graphql_shapes.py`` runs the query against
GitHub's published schema (``@octokit/graphql-schema``) with this answer as the
data, so a field the schema lacks, a wrong type or a missing selection fails.

Behaviour beyond the schema follows what GitHub shows for an edited issue: the
edit history starts with the issue as opened (its author, at its creation,
``diff`` holding the original text), then one node per edit whose ``diff`` is
the full text after it, newest first. An issue never edited has no nodes and a
null ``lastEditedAt``. Errors come with HTTP 200, as GitHub sends them.
"""

from __future__ import annotations

import base64
from typing import Any

from pipeline.testing.forges.base import Reply
from pipeline.testing.forges.model import FakeIssue, ForgeState


def answer(state: ForgeState, body: Any) -> Reply:
    """The reply to one ``POST /graphql`` with a JSON ``body``."""
    query = body.get("query") if isinstance(body, dict) else None
    if not isinstance(query, str) or "userContentEdits" not in query:
        return Reply(200, {"errors": [{"message": "the fake serves only the issue edits query"}]})
    variables = body.get("variables") or {}
    slug = f"{variables.get('owner')}/{variables.get('name')}"
    repo = state.repos.get(slug)
    if repo is None:
        message = f"Could not resolve to a Repository with the name '{slug}'."
        return _not_found(["repository"], message, {"repository": None})
    issue = repo.issues.get(int(variables.get("number") or 0))
    if issue is None or issue.is_pull_request:
        message = f"Could not resolve to an Issue with the number of {variables.get('number')}."
        return _not_found(["repository", "issue"], message, {"repository": {"issue": None}})
    return Reply(200, {"data": {"repository": {"issue": render(issue, variables.get("cursor"))}}})


def render(issue: FakeIssue, cursor: str | None, page_size: int = 100) -> dict[str, Any]:
    """The ``issue`` object as ``EDITS_QUERY`` selects it, one page of edits."""
    nodes = edit_nodes(issue)
    start = _offset(cursor)
    page = nodes[start : start + page_size]
    more = start + page_size < len(nodes)
    body_edits = [edit for edit in issue.edits if edit.field == "body"]
    return {
        "title": issue.title,
        "body": issue.body,
        "createdAt": issue.created_at,
        "lastEditedAt": body_edits[-1].at if body_edits else None,
        "author": _actor(issue.author),
        "userContentEdits": {
            "pageInfo": {
                "hasNextPage": more,
                "endCursor": _cursor(start + len(page)) if page else None,
            },
            "nodes": page,
        },
    }


def edit_nodes(issue: FakeIssue) -> list[dict[str, Any]]:
    """The body's edit history, newest first, the issue as opened last."""
    edits = [edit for edit in issue.edits if edit.field == "body"]
    if not edits:
        return []
    nodes = [_node(issue.created_at, issue.author, edits[0].old)]
    nodes += [_node(edit.at, edit.editor, edit.new) for edit in edits]
    return nodes[::-1]


def _node(at: str, editor: str, text: str) -> dict[str, Any]:
    return {"editedAt": at, "deletedAt": None, "diff": text, "editor": _actor(editor)}


def _actor(login: str) -> dict[str, Any]:
    return {"__typename": "User", "login": login}


def _not_found(path: list[str], message: str, data: dict[str, Any]) -> Reply:
    error = {
        "type": "NOT_FOUND",
        "path": path,
        "locations": [{"line": 2, "column": 3}],
        "message": message,
    }
    return Reply(200, {"data": data, "errors": [error]})


def _cursor(offset: int) -> str:
    return base64.b64encode(f"cursor:v2:{offset}".encode()).decode()


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        return int(base64.b64decode(cursor).decode().rsplit(":", 1)[1])
    except (ValueError, IndexError):
        return 0
