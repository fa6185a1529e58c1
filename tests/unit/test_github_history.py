"""GitHub edit history: revisions trusted only as far as the answer proves them."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.core.errors import FatalError, RetryableError
from pipeline.trackers.base import Revision
from pipeline.trackers.github_history import _issue, body_revisions, graphql_url, title_revisions

CREATED = "2026-01-01T00:00:01Z"


def issue(body: str, last_edited: str | None = None) -> dict[str, Any]:
    return {
        "title": "t",
        "body": body,
        "createdAt": CREATED,
        "lastEditedAt": last_edited,
        "author": {"__typename": "User", "login": "stranger"},
    }


def node(at: str, editor: str | None, diff: str | None, deleted: bool = False) -> dict[str, Any]:
    return {
        "editedAt": at,
        "deletedAt": at if deleted else None,
        "diff": diff,
        "editor": {"__typename": "User", "login": editor} if editor else None,
    }


def test_never_edited_issue_is_one_revision_by_its_author() -> None:
    """No edits: the body as opened, by the author, is the only revision."""
    assert body_revisions(issue("b"), [], "w") == (Revision(CREATED, "stranger", "b"),)


def test_listed_history_with_full_diffs_keeps_every_text() -> None:
    """When the newest diff equals the body, each diff is its revision's text (sorted)."""
    nodes = [node("2026-01-01T00:00:09Z", "maint", "v2", False), node(CREATED, "stranger", "v1")]
    revisions = body_revisions(issue("v2", "2026-01-01T00:00:09Z"), nodes, "w")
    assert [(r.editor, r.text) for r in revisions] == [("stranger", "v1"), ("maint", "v2")]


def test_diff_that_is_not_the_body_makes_older_texts_unknown() -> None:
    """A newest diff unlike the body means diffs are not full texts: none is relied on."""
    nodes = [
        node(CREATED, "stranger", "+ added a line"),
        node("2026-01-01T00:00:09Z", "stranger", "- removed one"),
    ]
    revisions = body_revisions(issue("current", "2026-01-01T00:00:09Z"), nodes, "w")
    assert [r.text for r in revisions] == [None, "current"]


def test_history_without_the_original_has_an_unknown_first_revision() -> None:
    """If GitHub does not list the issue as opened, its text counts as unknown."""
    nodes = [node("2026-01-01T00:00:09Z", "stranger", "v2")]
    revisions = body_revisions(issue("v2", "2026-01-01T00:00:09Z"), nodes, "w")
    assert revisions[0] == Revision(CREATED, "stranger", None)
    assert revisions[-1] == Revision("2026-01-01T00:00:09Z", "stranger", "v2")


def test_edit_later_than_every_listed_one_belongs_to_nobody() -> None:
    """``lastEditedAt`` after the newest listed edit: the current text is nobody's."""
    nodes = [node(CREATED, "stranger", "v1"), node("2026-01-01T00:00:05Z", "maint", "v2")]
    revisions = body_revisions(issue("v3", "2026-01-01T00:00:30Z"), nodes, "w")
    assert revisions[-1] == Revision("2026-01-01T00:00:30Z", None, "v3")
    assert [r.text for r in revisions[:-1]] == [None, None]


def test_deleted_revision_has_no_text() -> None:
    """A revision deleted from the history keeps its editor and time, not its text."""
    nodes = [
        node(CREATED, "stranger", "secret", deleted=True),
        node("2026-01-01T00:00:05Z", "maint", "v2"),
    ]
    revisions = body_revisions(issue("v2", "2026-01-01T00:00:05Z"), nodes, "w")
    assert [r.text for r in revisions] == [None, "v2"]


def test_title_history_from_renamed_events() -> None:
    """Renames give each title with its editor; the first ``from`` is the title as opened."""
    events = [
        {
            "event": "renamed",
            "created_at": "2026-01-01T00:00:20Z",
            "actor": {"login": "stranger"},
            "rename": {"from": "Fix add", "to": "pwned"},
        }
    ]
    revisions = title_revisions(events, {**issue("b"), "title": "pwned"}, "w")
    assert [(r.editor, r.text) for r in revisions] == [
        ("stranger", "Fix add"),
        ("stranger", "pwned"),
    ]


def test_title_no_event_explains_is_nobodys() -> None:
    """A current title no rename leads to is an unattributed revision."""
    revisions = title_revisions([], {**issue("b"), "title": "t"}, "w")
    assert revisions == (Revision(CREATED, "stranger", "t"),)
    events = [
        {
            "event": "renamed",
            "created_at": "2026-01-01T00:00:20Z",
            "actor": {"login": "maint"},
            "rename": {"from": "a", "to": "b"},
        }
    ]
    assert title_revisions(events, {**issue("b"), "title": "c"}, "w")[-1].editor is None


def test_graphql_url_for_github_and_enterprise() -> None:
    """github.com's GraphQL is /graphql; Enterprise's is /api/graphql beside /api/v3."""
    assert graphql_url("https://api.github.com") == "https://api.github.com/graphql"
    assert graphql_url("https://ghe.test/api/v3/") == "https://ghe.test/api/graphql"


def test_graphql_errors_are_classified() -> None:
    """NOT_FOUND is a missing issue, FORBIDDEN a permission problem, others retryable."""
    with pytest.raises(FatalError) as missing:
        _issue(
            {
                "data": {"repository": {"issue": None}},
                "errors": [{"type": "NOT_FOUND", "message": "no issue 9"}],
            },
            "u",
            9,
        )
    assert missing.value.kind == "missing_issue"
    with pytest.raises(FatalError) as forbidden:
        _issue({"errors": [{"type": "FORBIDDEN", "message": "no"}]}, "u", 9)
    assert forbidden.value.kind == "forge_forbidden"
    with pytest.raises(RetryableError):
        _issue({"errors": [{"message": "Something went wrong"}]}, "u", 9)
