"""Fuzzed webhook deliveries: intake and the HTTP route answer 2xx/4xx with a reason, never 5xx."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config.settings import RepoSettings, SecretRef, Settings, TrackerSettings
from pipeline.core.errors import FatalError
from pipeline.intake.lifecycle import Lifecycle
from pipeline.intake.service import Intake
from pipeline.store import Store
from pipeline.trackers.webhooks import sign_gitea, sign_github

# More examples for the long campaign (scripts/reliability --long).
EXAMPLES = 200 * (10 if os.environ.get("PIPELINE_RELIABILITY_LONG") == "1" else 1)

SECRET = "fuzz-webhook-secret"
KINDS = {"gh": "github", "gt": "gitea", "gl": "gitlab"}
SLUG = "acme/widgets"
HEADER_NAMES = st.sampled_from(
    [
        "x-github-event",
        "x-gitea-event",
        "x-forgejo-event",
        "x-gitlab-event",
        "x-github-delivery",
        "x-gitea-delivery",
        "x-gitlab-event-uuid",
        "x-hub-signature-256",
        "x-gitea-signature",
        "x-gitlab-token",
        "content-type",
        "x-other",
    ]
)
HEADER_VALUES = st.one_of(
    st.sampled_from(
        ["issues", "Issue Hook", "ping", "push", "issue_comment", "", SECRET, "sha256=" + "0" * 64]
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
)
LEAF = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
FIELDS = st.sampled_from(
    [
        "action",
        "issue",
        "label",
        "labels",
        "repository",
        "full_name",
        "sender",
        "login",
        "number",
        "iid",
        "title",
        "name",
        "object_kind",
        "object_attributes",
        "project",
        "path_with_namespace",
        "changes",
        "current",
        "previous",
        "user",
        "username",
        "state",
    ]
)
JSONISH = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(FIELDS, inner, max_size=5),
    max_leaves=25,
)


def _event_body() -> st.SearchStrategy[bytes]:
    plausible = st.fixed_dictionaries(
        {
            "action": st.sampled_from(["labeled", "label_updated", "opened", "closed", "x"]),
            "issue": st.dictionaries(FIELDS, JSONISH, max_size=5),
            "repository": st.fixed_dictionaries({"full_name": st.sampled_from([SLUG, "x/y", ""])}),
            "label": st.fixed_dictionaries({"name": st.sampled_from(["ready-for-agent", "bug"])}),
            "sender": st.fixed_dictionaries({"login": st.text(max_size=10)}),
        }
    )
    return st.one_of(
        plausible.map(lambda d: json.dumps(d).encode()),
        JSONISH.map(lambda d: json.dumps(d).encode()),
        st.binary(max_size=200),
    )


class _Tracker:
    """Every fetch fails as a forge would; intake must absorb it."""

    def get_issue(self, slug: str, number: int) -> Any:
        raise FatalError("missing_issue", f"{slug}#{number}: gone")

    def label_event(self, slug: str, number: int, label: str) -> Any:
        raise FatalError("missing_issue", f"{slug}#{number}: gone")

    def is_trusted(self, slug: str, actor: str) -> bool:
        raise FatalError("missing_repo", f"{slug}: gone")


@pytest.fixture(scope="module")
def intake() -> Iterator[Intake]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "secret").write_text(SECRET)
        secret = SecretRef(file=root / "secret")
        trackers = tuple(
            TrackerSettings(name=n, kind=k, base_url="http://127.0.0.1:9", webhook_secret=secret)
            for n, k in KINDS.items()
        )
        repos = tuple(
            RepoSettings(name=f"w-{n}", tracker=n, slug=SLUG, remote_url="unused") for n in KINDS
        )
        cfg = Settings(
            database_url=f"sqlite:///{root / 'h.db'}", volume=root, trackers=trackers, repos=repos
        )
        store = Store(cfg.database_url)
        store.upgrade()
        store.sync_repos(repos)
        clients: dict[str, Any] = {n: _Tracker() for n in KINDS}
        lifecycle = Lifecycle(store, clients, {t.name: t for t in trackers})
        yield Intake(store, cfg, clients, lifecycle)
        store.close()


def _signed(kind: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
    if kind == "github":
        return {**headers, "x-hub-signature-256": sign_github(SECRET.encode(), body)}
    if kind == "gitea":
        return {**headers, "x-gitea-signature": sign_gitea(SECRET.encode(), body)}
    return {**headers, "x-gitlab-token": SECRET}


def _check(status: int, payload: dict[str, object]) -> None:
    assert 200 <= status < 500, (status, payload)
    text = json.dumps(payload)
    assert "Traceback" not in text and SECRET not in text
    if status >= 400:
        assert isinstance(payload.get("error"), str) and payload["error"]


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(
    name=st.sampled_from([*KINDS, "nope"]),
    headers=st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=5),
    body=_event_body(),
)
def test_unsigned_deliveries_are_refused(
    intake: Intake, name: str, headers: dict[str, str], body: bytes
) -> None:
    """Without the right signature: 401 (or 404 for an unknown tracker), nothing enqueued."""
    if headers.get("x-gitlab-token") == SECRET:
        del headers["x-gitlab-token"]  # drawn by chance: that one is a valid GitLab token
    status, payload = intake.handle_webhook(name, headers, body)
    _check(status, payload)
    assert status in (401, 404)
    assert intake.store.list_runs() == []


@FUZZ
@given(
    name=st.sampled_from(list(KINDS)),
    headers=st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=4),
    body=_event_body(),
)
def test_signed_deliveries_never_fail(
    intake: Intake, name: str, headers: dict[str, str], body: bytes
) -> None:
    """Correctly signed, any content: a 2xx or a 400 naming the problem, never an exception."""
    status, payload = intake.handle_webhook(name, _signed(KINDS[name], body, headers), body)
    _check(status, payload)
    assert status in (200, 202, 400)


@pytest.fixture(scope="module")
def http(intake: Intake) -> Iterator[httpx.Client]:
    """The real app on a loopback port, its webhooks handed to the fuzzed intake."""
    from pipeline.http.app import AppOptions, create_app, serve

    handle = serve(
        create_app(intake.store, intake.settings, AppOptions(webhook_handler=intake.handle_webhook))
    )
    with httpx.Client(base_url=handle.url, timeout=10) as client:
        yield client
    handle.stop()


@FUZZ
@given(
    name=st.sampled_from([*KINDS, "nope", "..%2F..%2Fetc"]),
    headers=st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=4),
    body=_event_body(),
    sign=st.booleans(),
)
def test_http_route_never_answers_5xx(
    http: httpx.Client, name: str, headers: dict[str, str], body: bytes, sign: bool
) -> None:
    """POST /webhooks/<tracker> with anything: a JSON 2xx/4xx answer with a reason."""
    headers = {k: v.strip() for k, v in headers.items()}  # HTTP trims header values
    if sign and name in KINDS:
        headers = _signed(KINDS[name], body, headers)
    answer = http.post(f"/webhooks/{name}", content=body, headers=headers)
    assert answer.status_code < 500, answer.text
    assert "Traceback" not in answer.text and SECRET not in answer.text
    if answer.status_code >= 400:
        assert answer.json().get("error")
