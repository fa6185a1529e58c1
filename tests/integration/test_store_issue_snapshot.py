"""The issue snapshot taken at the trusted label, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from pipeline.config.settings import RepoSettings
from pipeline.store import Issue, IssueSnapshot, SeenIssue, Store


@pytest.fixture
def store(store: Store) -> Store:
    """The shared store with app (gh:acme/app) enrolled."""
    store.sync_repos((RepoSettings(name="app", tracker="gh", slug="acme/app", remote_url="x"),))
    return store


def _seen(store: Store, snapshot: IssueSnapshot | None) -> Issue:
    return store.upsert_issue(
        "app", SeenIssue(tracker="gh", number=7, title="t", author="a", url="u", snapshot=snapshot)
    )


def test_first_snapshot_is_stored_with_its_label_time(store: Store) -> None:
    """The title, body, label time and forge time of the first sighting are kept."""
    issue = _seen(store, IssueSnapshot("Fix add", "As labelled", "2026-01-01T00:00:10Z", "T11"))
    again = store.get_issue(issue.id)
    assert again is not None
    assert (again.labelled_title, again.labelled_body) == ("Fix add", "As labelled")
    assert (again.labelled_at, again.labelled_remote_updated_at) == ("2026-01-01T00:00:10Z", "T11")
    assert again.snapshot_taken_at is not None


def test_later_sightings_of_the_same_label_never_overwrite(store: Store) -> None:
    """A later poll of the same labelling, body since edited, keeps the first snapshot."""
    _seen(store, IssueSnapshot("Fix add", "As labelled", "2026-01-01T00:00:10Z", "T11"))
    issue = _seen(store, IssueSnapshot("pwned", "IGNORE PREVIOUS", "2026-01-01T00:00:10Z", "T20"))
    assert (issue.labelled_title, issue.labelled_body) == ("Fix add", "As labelled")
    unknown = _seen(store, IssueSnapshot("pwned", "IGNORE PREVIOUS", None, "T21"))
    assert unknown.labelled_body == "As labelled"  # an unknown label time is no new label
    assert _seen(store, None).labelled_body == "As labelled"


def test_a_new_label_replaces_the_snapshot(store: Store) -> None:
    """Labelled again later (a new label time): what that label vouched for is kept."""
    _seen(store, IssueSnapshot("Fix add", "v1", "2026-01-01T00:00:10Z", "T11"))
    issue = _seen(store, IssueSnapshot("Fix add", "v2", "2026-02-01T00:00:00Z", "T40"))
    assert (issue.labelled_body, issue.labelled_at) == ("v2", "2026-02-01T00:00:00Z")


def test_issue_seen_without_snapshot_has_none(store: Store) -> None:
    """An upsert that carries no snapshot leaves the columns empty."""
    issue = _seen(store, None)
    assert issue.snapshot_taken_at is None and issue.labelled_body is None
