"""Push mode ``branch``: each tracker opens one pull (merge) request per branch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.config.settings import TrackerSettings
from pipeline.core.errors import FatalError
from pipeline.store import Store
from pipeline.testing.forges import FakeGitea, FakeGitHub, FakeGitLab
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import client_for
from pipeline.trackers.local import LocalTracker

SLUG = "acme/widgets"
CREATE = {
    "github": "/repos/acme/widgets/pulls",
    "gitea": "/repos/acme/widgets/pulls",
    "gitlab": "/projects/acme/widgets/merge_requests",
}


@pytest.fixture(params=["github", "gitea", "gitlab"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeForge]:
    cls = {"github": FakeGitHub, "gitea": FakeGitea, "gitlab": FakeGitLab}[request.param]
    forge: FakeForge = cls(token="fake-token")
    forge.add_issue(SLUG, "the issue")
    with forge:
        yield forge


def test_open_pull_request_creates_one_with_branches_and_text(fake: FakeForge) -> None:
    """The request lands on the forge with head, base, title and body; its web URL is returned."""
    url = client_for(fake).open_pull_request(SLUG, "afk/run-7", "main", "Add mul (#1)", "Closes #1")
    [pull] = fake.pulls(SLUG)
    assert (pull.head, pull.base, pull.title, pull.body) == (
        "afk/run-7",
        "main",
        "Add mul (#1)",
        "Closes #1",
    )
    assert url.startswith("https://") and url.endswith(f"/{pull.number}")
    assert fake.paths("POST") == [CREATE[fake.forge]]


def test_open_pull_request_twice_reuses_the_open_one(fake: FakeForge) -> None:
    """A retried publish gets the same URL back and no second request is opened."""
    client = client_for(fake)
    first = client.open_pull_request(SLUG, "afk/run-7", "main", "t", "b")
    second = client.open_pull_request(SLUG, "afk/run-7", "main", "t", "b")
    assert first == second
    assert len(fake.pulls(SLUG)) == 1
    assert fake.paths("POST") == [CREATE[fake.forge]]
    other = client.open_pull_request(SLUG, "afk/run-8", "main", "t", "b")
    assert other != first and len(fake.pulls(SLUG)) == 2


def test_pull_requests_stay_out_of_ready_issues(fake: FakeForge) -> None:
    """An opened pull request never shows up as a ready issue, even when labelled."""
    client = client_for(fake)
    client.open_pull_request(SLUG, "afk/run-7", "main", "t", "b")
    [pull] = fake.pulls(SLUG)
    fake.apply_label(SLUG, pull.number, "ready-for-agent", "alice")
    assert client.list_ready(SLUG) == []


def test_open_pull_request_on_missing_repo_is_fatal(fake: FakeForge) -> None:
    """A repo the forge does not know is a FatalError naming the URL, not a silent None."""
    with pytest.raises(FatalError) as info:
        client_for(fake).open_pull_request("acme/nope", "b", "main", "t", "b")
    assert "acme" in str(info.value)


def test_local_tracker_comments_once_on_the_referenced_issue(store: Store) -> None:
    """The local tracker returns a local:// URL and comments once on each issue the body names."""
    settings = TrackerSettings(name="local", kind="local")
    tracker = LocalTracker(settings, store, {"demo/calc": "calc"})
    issue = store.add_local_issue("calc", "Add mul", labels=("ready-for-agent",))
    other = store.add_local_issue("web", "Elsewhere")
    body = f"Closes #{issue.id}. See also #{other.id}."
    for _ in range(2):
        url = tracker.open_pull_request("demo/calc", "afk/run-3", "main", "Add mul", body)
    assert url == "local://calc/branches/afk/run-3"
    [comment] = store.local_comments(issue.id)
    assert url in comment.body and "`main`" in comment.body
    assert store.local_comments(other.id) == []  # another repo's issue is not touched
