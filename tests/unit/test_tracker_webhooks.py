"""Webhook signature checks and parsing into the neutral WebhookEvent."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from pipeline.testing.forges import FakeGitea, FakeGitLab
from pipeline.trackers.webhooks import (
    WebhookPayloadError,
    parse_event,
    sign_gitea,
    sign_github,
    verify,
    verify_gitea,
    verify_github,
    verify_gitlab,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "github"

# GitHub's documented test values ("Validating webhook deliveries").
DOC_SECRET = b"It's a Secret to Everybody"
DOC_PAYLOAD = b"Hello, World!"
DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def _fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _github_headers(
    event: str, delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
) -> dict[str, str]:
    return {"x-github-event": event, "x-github-delivery": delivery}


def test_github_documented_test_vector_verifies() -> None:
    """GitHub's published secret/payload/signature triple verifies."""
    assert verify_github(DOC_SECRET, DOC_PAYLOAD, DOC_SIGNATURE)
    assert sign_github(DOC_SECRET, DOC_PAYLOAD) == DOC_SIGNATURE


@pytest.mark.parametrize(
    ("secret", "body", "header"),
    [
        (b"another secret", DOC_PAYLOAD, DOC_SIGNATURE),
        (DOC_SECRET, b"Hello, World?", DOC_SIGNATURE),
        (DOC_SECRET, DOC_PAYLOAD, DOC_SIGNATURE.replace("sha256=", "sha1=")),
        (DOC_SECRET, DOC_PAYLOAD, DOC_SIGNATURE[:-1] + "0"),
        (DOC_SECRET, DOC_PAYLOAD, None),
        (DOC_SECRET, DOC_PAYLOAD, ""),
        (b"", DOC_PAYLOAD, DOC_SIGNATURE),
    ],
    ids=[
        "wrong-secret",
        "tampered-body",
        "wrong-prefix",
        "wrong-digest",
        "missing",
        "empty",
        "no-secret",
    ],
)
def test_github_wrong_signatures_fail(secret: bytes, body: bytes, header: str | None) -> None:
    """Any mismatch, missing header or unset secret fails verification."""
    assert not verify_github(secret, body, header)


def test_gitea_and_forgejo_signatures() -> None:
    """Gitea/Forgejo: bare hex HMAC-SHA256 under either header name."""
    body = b'{"action":"label_updated"}'
    signature = sign_gitea(b"s3cret", body)
    assert len(signature) == 64 and not signature.startswith("sha256=")
    assert verify_gitea(b"s3cret", body, signature)
    assert not verify_gitea(b"s3cret", body + b" ", signature)
    assert verify("gitea", b"s3cret", {"x-gitea-signature": signature}, body)
    assert verify("forgejo", b"s3cret", {"x-forgejo-signature": signature}, body)
    assert not verify("gitea", b"s3cret", {}, body)


def test_gitlab_token() -> None:
    """GitLab: X-Gitlab-Token must equal the secret."""
    assert verify_gitlab(b"tok", "tok")
    assert not verify_gitlab(b"tok", "tok2")
    assert not verify_gitlab(b"tok", None)
    assert verify("gitlab", b"tok", {"x-gitlab-token": "tok"}, b"{}")
    assert not verify("bitbucket", b"tok", {"x-gitlab-token": "tok"}, b"{}")


def test_parse_octokit_issues_labeled_example() -> None:
    """The published issues.labeled example becomes a 'labeled' event with its label and repo."""
    event = parse_event(
        "github", _github_headers("issues"), _fixture("webhook-issues.labeled.json")
    )
    assert event is not None
    assert event.delivery_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert (event.action, event.repo_slug, event.issue_number) == (
        "labeled",
        "Codertocat/Hello-World",
        1,
    )
    assert event.sender == "Codertocat"
    assert event.labels_added == ("bug",) and event.added("bug")
    assert not event.added("ready-for-agent") and not event.is_pull_request


def test_parse_octokit_issues_opened_example() -> None:
    """An 'opened' delivery parses but adds no label."""
    event = parse_event("github", _github_headers("issues"), _fixture("webhook-issues.opened.json"))
    assert event is not None and event.action == "opened"
    assert event.labels_added == () and not event.added("bug")


def _form(payload: bytes) -> bytes:
    """A body as GitHub sends it for a webhook set to application/x-www-form-urlencoded."""
    return urlencode({"payload": payload.decode("utf-8")}).encode("ascii")


FORM_HEADERS = {**_github_headers("issues"), "content-type": "application/x-www-form-urlencoded"}


def test_form_encoded_published_example_parses_like_json() -> None:
    """The published issues.labeled example sent form-encoded gives the same event as JSON,
    and its signature covers the raw form body, not the JSON inside it."""
    published = _fixture("webhook-issues.labeled.json")
    body = _form(published)
    assert parse_event("github", FORM_HEADERS, body) == parse_event(
        "github", _github_headers("issues"), published
    )
    secret = b"form-secret"
    assert verify_github(secret, body, sign_github(secret, body))
    assert not verify_github(secret, body, sign_github(secret, published))


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"action=labeled", "no 'payload' field"),
        (b"payload=%7B%7D&payload=%7B%7D", "2 'payload' field"),
        (b"payload=%FF", "form body is malformed"),
        (b"payload", "form body is malformed"),
        ("payload=é".encode(), "form body is malformed"),
        (b"payload=%5B1%5D", "not a JSON object"),
    ],
    ids=["no-payload", "two-payloads", "not-utf8", "no-equals", "not-ascii", "not-object"],
)
def test_malformed_form_deliveries_name_the_problem(body: bytes, needle: str) -> None:
    """A form-encoded delivery without exactly one JSON-object 'payload' field is refused
    with what is wrong."""
    with pytest.raises(WebhookPayloadError, match=re.escape(needle)):
        parse_event("github", FORM_HEADERS, body)


def test_ping_and_other_events_are_none() -> None:
    """Deliveries intake does not handle (ping, push) parse to None."""
    assert parse_event("github", _github_headers("ping"), _fixture("webhook-ping.json")) is None
    assert parse_event("gitlab", {"x-gitlab-event": "Push Hook"}, b"{}") is None
    assert parse_event("gitea", {"x-gitea-event": "push"}, b"{}") is None


@pytest.mark.parametrize(
    ("headers", "body", "needle"),
    [
        (_github_headers("issues"), b"{not json", "not valid JSON"),
        (_github_headers("issues"), b"[1, 2]", "not a JSON object"),
        (
            _github_headers("issues"),
            b'{"action": "labeled", "issue": {"number": 1}}',
            "'repository.full_name'",
        ),
        ({"x-github-event": "issues"}, None, "x-github-delivery"),
        (_github_headers("issues"), b'{"a": ' * 10_000, "not valid JSON"),
    ],
    ids=["not-json", "not-object", "missing-field", "missing-delivery", "nested-too-deep"],
)
def test_malformed_github_payloads_name_the_problem(
    headers: dict[str, str], body: bytes | None, needle: str
) -> None:
    """A malformed delivery raises WebhookPayloadError saying what is wrong."""
    with pytest.raises(WebhookPayloadError) as info:
        parse_event("github", headers, body or _fixture("webhook-issues.labeled.json"))
    assert needle in str(info.value)


def test_unknown_kind_is_an_error() -> None:
    """A tracker kind without webhooks is refused clearly."""
    with pytest.raises(WebhookPayloadError, match="local"):
        parse_event("local", {}, b"{}")


def _gitea_payload() -> dict[str, Any]:
    fake = FakeGitea()
    number = fake.add_issue("acme/w", "t", labels=["ready-for-agent"], labelled_by="bob")
    return fake.labeled_webhook("acme/w", number, "bob")


def test_parse_gitea_label_updated() -> None:
    """Gitea's label_updated becomes 'labeled' with every current label as possibly added."""
    body = json.dumps(_gitea_payload()).encode()
    headers = {"x-gitea-event": "issues", "x-gitea-delivery": "d-1"}
    event = parse_event("gitea", headers, body)
    assert event is not None
    assert (event.forge, event.delivery_id, event.action) == ("gitea", "d-1", "labeled")
    assert (event.repo_slug, event.issue_number, event.sender) == ("acme/w", 1, "bob")
    assert event.added("ready-for-agent")
    forgejo = parse_event(
        "forgejo", {"x-forgejo-event": "issues", "x-forgejo-delivery": "d-2"}, body
    )
    assert forgejo is not None and forgejo.delivery_id == "d-2"


def test_parse_gitlab_issue_hook_label_added() -> None:
    """GitLab's Issue Hook with grown changes.labels is 'labeled' with just the new label."""
    fake = FakeGitLab()
    number = fake.add_issue("group/sub/w", "t", labels=["bug", "ready-for-agent"])
    payload = fake.labeled_webhook("group/sub/w", number, "ready-for-agent", "carol")
    headers = {"x-gitlab-event": "Issue Hook", "idempotency-key": "k-1", "x-gitlab-event-uuid": "u"}
    event = parse_event("gitlab", headers, json.dumps(payload).encode())
    assert event is not None
    assert (event.delivery_id, event.action, event.repo_slug) == ("k-1", "labeled", "group/sub/w")
    assert event.labels_added == ("ready-for-agent",) and event.sender == "carol"
    payload["changes"] = {}
    plain = parse_event("gitlab", {**headers, "idempotency-key": ""}, json.dumps(payload).encode())
    assert plain is not None and plain.action == "update" and plain.delivery_id == "u"


def test_parse_gitlab_confidential_issue_hook_like_an_issue_hook() -> None:
    """A confidential issue's delivery (``Confidential Issue Hook``) reads as an issue's."""
    fake = FakeGitLab()
    number = fake.add_issue("group/w", "t", labels=["ready-for-agent"])
    payload = fake.labeled_webhook("group/w", number, "ready-for-agent", "carol")
    payload["event_type"] = "confidential_issue"
    headers = {"x-gitlab-event": "Confidential Issue Hook", "idempotency-key": "k-2"}
    event = parse_event("gitlab", headers, json.dumps(payload).encode())
    assert event is not None and event.added("ready-for-agent") and event.issue_number == number
