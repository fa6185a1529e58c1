"""Who changed a GitHub issue's title and body, and when its label was added.

REST names no editor for body edits, so the body's revisions come from the
GraphQL API (schema as published in ``@octokit/graphql-schema``):
``Issue.userContentEdits`` lists ``UserContentEdit`` nodes with ``editor``,
``editedAt`` and ``diff``. The schema describes ``diff`` only as "a summary of
the changes for this edit", so a revision's ``diff`` is taken as its full text
only when the newest one equals the body returned in the same answer; otherwise
every older revision's text counts as unknown. The order of the nodes is not
documented either: they are sorted by ``editedAt`` here. An issue whose
``lastEditedAt`` is later than every listed edit was changed by someone GitHub
does not list, and that change is attributed to nobody (so it is not trusted).

Title changes are REST issue events of type ``renamed`` (``rename.from``/``to``),
label additions are ``labeled`` events: both come from one events listing, read
after the GraphQL answer, so every rename that made the title it returned is listed
(a stranger's rename landing between the two reads is weighed, not taken for the
title as opened).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pipeline.core.errors import FatalError
from pipeline.trackers.base import (
    LabelMark,
    Revision,
    as_dict,
    as_list,
    bad_response,
    field,
    parse_time,
    text,
)
from pipeline.trackers.http import ForgeHttp

MAX_EDIT_PAGES = 10

EDITS_QUERY = """\
query IssueEdits($owner: String!, $name: String!, $number: Int!, $cursor: String) {
  repository(owner: $owner, name: $name) {
    issue(number: $number) {
      title
      body
      createdAt
      lastEditedAt
      author { __typename login }
      userContentEdits(first: 100, after: $cursor) {
        pageInfo { hasNextPage endCursor }
        nodes {
          editedAt
          deletedAt
          diff
          editor { __typename login }
        }
      }
    }
  }
}
"""


def graphql_url(rest_base: str) -> str:
    """``<base>/graphql``; for Enterprise, ``.../api/v3`` gives ``.../api/graphql``."""
    base = rest_base.rstrip("/")
    if base.endswith("/api/v3"):
        return base[: -len("/v3")] + "/graphql"
    return base + "/graphql"


def login(user: Any) -> str | None:
    if isinstance(user, dict) and isinstance(user.get("login"), str):
        return str(user["login"])
    return None


def label_marks(events: list[Any], label: str, where: str) -> tuple[LabelMark, ...]:
    """Every ``labeled`` event for ``label``, oldest first."""
    marks = []
    for raw in events:
        event = as_dict(raw, where)
        named = event.get("label")
        is_label = isinstance(named, dict) and named.get("name") == label
        if event.get("event") == "labeled" and is_label:
            marks.append(LabelMark(login(event.get("actor")), text(event, "created_at", where)))
    return tuple(sorted(marks, key=lambda mark: parse_time(mark.at)))


def title_revisions(
    events: list[Any], issue: Mapping[str, Any], where: str
) -> tuple[Revision, ...]:
    """The title as opened, then each rename; a title no event explains is nobody's."""
    renames = []
    for raw in events:
        event = as_dict(raw, where)
        if event.get("event") == "renamed":
            rename = field(event, "rename", where, dict)
            at = text(event, "created_at", where)
            renames.append(
                (
                    at,
                    login(event.get("actor")),
                    text(rename, "from", where),
                    text(rename, "to", where),
                )
            )
    renames.sort(key=lambda item: parse_time(item[0]))
    created, current = text(issue, "createdAt", where), text(issue, "title", where)
    author = login(issue.get("author"))
    if not renames:
        return (Revision(created, author, current),)
    revisions = [Revision(created, author, renames[0][2])]
    revisions += [Revision(at, actor, new) for at, actor, _, new in renames]
    if revisions[-1].text != current:  # renamed between the two calls, or an unlisted rename
        revisions.append(Revision(revisions[-1].at, None, current))
    return tuple(revisions)


def fetch_issue_edits(
    http: ForgeHttp, url: str, owner: str, name: str, number: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The issue (title, body, createdAt, lastEditedAt, author) and every edit node."""
    nodes: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_EDIT_PAGES):
        variables = {"owner": owner, "name": name, "number": number, "cursor": cursor}
        page = http.query(url, {"query": EDITS_QUERY, "variables": variables})
        issue = _issue(as_dict(page.data, page.url), page.url, number)
        edits = field(issue, "userContentEdits", page.url, dict)
        nodes += [as_dict(node, page.url) for node in as_list(edits.get("nodes"), page.url)]
        info = field(edits, "pageInfo", page.url, dict)
        if not info.get("hasNextPage"):
            return issue, nodes
        cursor = field(info, "endCursor", page.url, str)
    raise bad_response(url, f"issue #{number} has more than {MAX_EDIT_PAGES * 100} edits")


def body_revisions(
    issue: Mapping[str, Any], nodes: list[dict[str, Any]], where: str
) -> tuple[Revision, ...]:
    """The body as opened, then each listed edit; texts only where ``diff`` proves full."""
    created, author = text(issue, "createdAt", where), login(issue.get("author"))
    body = text(issue, "body", where)
    edits = sorted(
        (_node_revision(node, where) for node in nodes), key=lambda rev: parse_time(rev.at)
    )
    last_edited = issue.get("lastEditedAt")
    if isinstance(last_edited, str) and (
        not edits or parse_time(last_edited) > parse_time(edits[-1].at)
    ):
        edits.append(Revision(last_edited, None, None))  # an edit nobody is listed for
    if not edits or parse_time(edits[0].at) > parse_time(created):
        edits.insert(0, Revision(created, author, None if edits else body))
    if edits[-1].text != body:
        edits = [replace(rev, text=None) for rev in edits[:-1]] + [replace(edits[-1], text=body)]
    return tuple(edits)


def _node_revision(node: Mapping[str, Any], where: str) -> Revision:
    diff = node.get("diff")
    deleted = node.get("deletedAt") is not None
    return Revision(
        text(node, "editedAt", where),
        login(node.get("editor")),
        diff if isinstance(diff, str) and not deleted else None,
    )


def _issue(data: dict[str, Any], where: str, number: int) -> dict[str, Any]:
    errors = data.get("errors")
    if errors:
        types = {str(e.get("type")) for e in errors if isinstance(e, dict)}
        messages = "; ".join(str(e.get("message")) for e in errors if isinstance(e, dict))
        if "NOT_FOUND" in types:
            raise FatalError("missing_issue", f"github POST {where}: {messages}")
        if types & {"FORBIDDEN", "INSUFFICIENT_SCOPES"}:
            raise FatalError("forge_forbidden", f"github POST {where}: {messages}")
        raise bad_response(f"github POST {where}", f"GraphQL errors: {messages}")
    repository = field(data, "data.repository", where, (dict, type(None)))
    issue = repository.get("issue") if repository else None
    if not isinstance(issue, dict):
        raise FatalError("missing_issue", f"github POST {where}: issue #{number} not found")
    return issue
