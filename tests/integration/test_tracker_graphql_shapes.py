"""The issue-edits GraphQL query and the fake's answer follow GitHub's published schema.

The schema is ``@octokit/graphql-schema``'s ``schema.graphql``, trimmed to the
types the query walks (``tests/fixtures/github/README.md`` says how). The
query must validate against it; the fake's answer, fed back as the root value
of that query, must execute without errors and come out unchanged, so a field
the schema lacks, a null where it says non-null, a wrong scalar or a field the
query did not select all fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import GraphQLSchema, build_schema, graphql_sync, parse, validate

from pipeline.testing.forges import FakeGitHub
from pipeline.trackers.github_history import EDITS_QUERY

SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "github" / "graphql-issue-edits.graphql"
SLUG = "octocat/Hello-World"


@pytest.fixture(scope="module")
def schema() -> GraphQLSchema:
    return build_schema(SCHEMA.read_text(encoding="utf-8"))


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(token="t")
    edited = fake.add_issue(SLUG, "Found a bug", body="As opened", author="octocat")
    fake.edit_issue(SLUG, edited, "mallory", body="Edited once")
    fake.edit_issue(SLUG, edited, "octocat", body="Edited twice", title="Found two bugs")
    fake.add_issue(SLUG, "Never edited", body="", author="octocat")
    with fake:
        yield fake


def _ask(fake: FakeGitHub, number: int, path: str = "/graphql") -> dict[str, Any]:
    variables = {"owner": "octocat", "name": "Hello-World", "number": number, "cursor": None}
    response = httpx.post(
        fake.url + path,
        json={"query": EDITS_QUERY, "variables": variables},
        headers={"Authorization": "Bearer t"},
    )
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()
    return answer


def test_query_validates_against_the_published_schema(schema: GraphQLSchema) -> None:
    """Every field, argument and variable of the client's query exists in GitHub's schema."""
    assert validate(schema, parse(EDITS_QUERY)) == []


def test_query_with_a_misspelt_field_is_caught(schema: GraphQLSchema) -> None:
    """The check can fail: a field GitHub does not have is reported."""
    wrong = EDITS_QUERY.replace("editedAt", "editedOn")
    [error] = validate(schema, parse(wrong))
    assert error.message.startswith("Cannot query field 'editedOn' on type 'UserContentEdit'.")


@pytest.mark.parametrize("number", [1, 2])
def test_fake_answer_is_exactly_what_the_schema_yields(
    schema: GraphQLSchema, github: FakeGitHub, number: int
) -> None:
    """The fake's data, executed as the query's root value, comes back unchanged and valid."""
    answer = _ask(github, number)
    assert "errors" not in answer
    variables = {"owner": "octocat", "name": "Hello-World", "number": number, "cursor": None}
    result = graphql_sync(schema, EDITS_QUERY, root_value=answer["data"], variable_values=variables)
    assert result.errors is None
    assert result.data == answer["data"]
    issue = answer["data"]["repository"]["issue"]
    for stamp in [issue["createdAt"], issue["lastEditedAt"]] + [
        node["editedAt"] for node in issue["userContentEdits"]["nodes"]
    ]:
        if stamp is not None:
            assert datetime.fromisoformat(stamp).tzinfo is not None  # DateTime: ISO-8601 UTC


def test_fake_edit_history_holds_each_revision(github: FakeGitHub) -> None:
    """The history lists the issue as opened and each edit, with editor and full text."""
    issue = _ask(github, 1)["data"]["repository"]["issue"]
    nodes = issue["userContentEdits"]["nodes"]
    assert [(n["editor"]["login"], n["diff"]) for n in nodes] == [
        ("octocat", "Edited twice"),
        ("mallory", "Edited once"),
        ("octocat", "As opened"),
    ]
    assert issue["lastEditedAt"] == nodes[0]["editedAt"] and issue["body"] == "Edited twice"
    never = _ask(github, 2)["data"]["repository"]["issue"]
    assert never["userContentEdits"]["nodes"] == [] and never["lastEditedAt"] is None


def test_missing_issue_answers_a_graphql_not_found(github: FakeGitHub) -> None:
    """A missing issue is a 200 with a null issue and a NOT_FOUND error naming its path."""
    answer = _ask(github, 99)
    assert answer["data"] == {"repository": {"issue": None}}
    [error] = answer["errors"]
    assert error["type"] == "NOT_FOUND" and error["path"] == ["repository", "issue"]
    assert isinstance(error["message"], str) and error["message"]


def test_enterprise_serves_graphql_beside_the_rest_prefix() -> None:
    """With the REST API under /api/v3 the fake answers GraphQL at /api/graphql."""
    fake = FakeGitHub(token="t", api_prefix="/api/v3")
    fake.add_issue(SLUG, "t", body="b")
    with fake:
        issue = _ask(fake, 1, "/api/graphql")["data"]["repository"]["issue"]
        assert issue["body"] == "b"
        missing = httpx.post(fake.url + "/graphql", json={}, headers={"Authorization": "Bearer t"})
        assert missing.status_code == 404
