"""The fakes speak GitHub's published shapes, and send_webhook signs as the forges do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pipeline.testing.forges import FakeGitea, FakeGitHub, FakeGitLab, send_webhook, serve_app
from pipeline.testing.forges.base import ServedApp
from pipeline.trackers.webhooks import parse_event, verify

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "github"
SLUG = "octocat/Hello-World"
SHA = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
OPTIONAL = {"pull_request"}  # only on pull requests; the example happens to be one
# Hypermedia URLs on user objects: the fake leaves them out (nothing reads them).
USER_URLS = {
    "avatar_url",
    "gravatar_id",
    "url",
    "html_url",
    "followers_url",
    "following_url",
    "gists_url",
    "starred_url",
    "subscriptions_url",
    "organizations_url",
    "repos_url",
    "events_url",
    "received_events_url",
    "user_view_type",
}


def _fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def _first(data: Any) -> dict[str, Any]:
    return data[0] if isinstance(data, list) else data


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(token="t")
    number = fake.add_issue(SLUG, "Found a bug", body="I'm having a problem", labels=["bug"])
    fake.add_comment(SLUG, number, "Me too", "octocat")
    fake.set_permission(SLUG, "octocat", "admin")
    fake.add_status(SLUG, SHA, "continuous-integration/jenkins", "success", "https://ci.test/1")
    fake.add_check_run(SLUG, SHA, "mighty_readme", "completed", "neutral")
    with fake:
        yield fake


@pytest.mark.parametrize(
    ("fixture", "path"),
    [
        ("rest-issues-list.json", "/repos/{slug}/issues"),
        ("rest-issue-events.json", "/repos/{slug}/issues/1/events"),
        ("rest-issue-comments.json", "/repos/{slug}/issues/1/comments"),
        ("rest-labels.json", "/repos/{slug}/labels"),
        ("rest-check-runs.json", "/repos/{slug}/commits/{sha}/check-runs"),
        ("rest-combined-status.json", "/repos/{slug}/commits/{sha}/status"),
        ("rest-collaborator-permission.json", "/repos/{slug}/collaborators/octocat/permission"),
    ],
)
def test_github_fake_has_every_published_key(github: FakeGitHub, fixture: str, path: str) -> None:
    """Each fake GitHub response carries every key of the OpenAPI example, same JSON types."""
    url = github.url + path.format(slug=SLUG, sha=SHA)
    response = httpx.get(url, headers={"Authorization": "Bearer t"})
    assert response.status_code == 200
    expected, actual = _first(_fixture(fixture)), _first(response.json())
    missing = set(expected) - set(actual) - OPTIONAL
    assert not missing
    for key in ("check_runs", "statuses"):
        if key in expected:
            assert set(expected[key][0]) <= set(actual[key][0])
    for key, value in expected.items():
        if value is not None and actual.get(key) is not None:
            assert type(value) is type(actual[key]), key


def test_github_fake_webhook_matches_octokit_example() -> None:
    """The fake's labeled payload has the octokit example's keys at each level we read."""
    example = _fixture("webhook-issues.labeled.json")
    fake = FakeGitHub()
    number = fake.add_issue(SLUG, "t", labels=["bug"])
    payload = fake.labeled_webhook(SLUG, number, "bug", "Codertocat")
    assert set(payload) == set(example)
    assert set(example["label"]) <= set(payload["label"])
    assert set(example["sender"]) - USER_URLS <= set(payload["sender"])
    assert {"number", "labels", "user", "state"} <= set(payload["issue"])


def _receiver(kind: str, secret: bytes) -> Starlette:
    async def hook(request: Request) -> JSONResponse:
        body = await request.body()
        if not verify(kind, secret, request.headers, body):
            return JSONResponse({"error": "bad signature"}, status_code=401)
        event = parse_event(kind, request.headers, body)
        return JSONResponse(
            {
                "action": event.action if event else None,
                "delivery": event.delivery_id if event else None,
            }
        )

    return Starlette(routes=[Route("/hook", hook, methods=["POST"])])


@pytest.mark.parametrize(
    ("kind", "event"), [("github", "issues"), ("gitea", "issues"), ("gitlab", "Issue Hook")]
)
def test_send_webhook_signs_like_the_forge(kind: str, event: str) -> None:
    """A signed delivery verifies and parses on a real receiver; a wrong secret gets 401."""
    fake = {"github": FakeGitHub, "gitea": FakeGitea, "gitlab": FakeGitLab}[kind]()
    number = fake.add_issue("acme/w", "t", labels=["ready-for-agent"])
    if isinstance(fake, FakeGitea):
        payload = fake.labeled_webhook("acme/w", number, "bob")
    else:
        payload = fake.labeled_webhook("acme/w", number, "ready-for-agent", "bob")
    served: ServedApp = serve_app(_receiver(kind, b"hook-secret"))
    with served:
        ok = send_webhook(
            served.url + "/hook", event, payload, "hook-secret", kind=kind, delivery_id="d-42"
        )
        bad = send_webhook(served.url + "/hook", event, payload, "not-it", kind=kind)
    assert ok.status_code == 200 and ok.json() == {"action": "labeled", "delivery": "d-42"}
    assert bad.status_code == 401
