"""The run's progress comment against each fake forge and the local tracker: one comment, edited."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from pipeline.config.settings import TrackerSettings
from pipeline.run.progress import CommentSlot, ProgressComment, ProgressView, progress_marker
from pipeline.store import Store
from pipeline.testing.forges import served
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import client_for
from pipeline.trackers.base import Tracker
from pipeline.trackers.local import LocalTracker

SLUG = "acme/widgets"
EDIT = {"github": "PATCH", "gitea": "PATCH", "gitlab": "PUT"}


@pytest.fixture(params=["github", "gitea", "gitlab"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeForge]:
    with served(request.param, SLUG) as forge:
        yield forge


def _slot(tracker: Tracker, number: int, known: str | None, seen: list[str]) -> CommentSlot:
    return CommentSlot(tracker, (SLUG, number), 7, known, remember=seen.append)


def _body(text: str) -> str:
    return f"{text}\n\n{progress_marker(7)}"


def test_first_write_posts_then_edits_in_place(fake: FakeForge) -> None:
    """The first write posts the comment and records its id; later writes edit that comment."""
    number = fake.add_issue(SLUG, "progress", body="do it")
    fake.add_comment(SLUG, number, "a human's comment", "alice")
    seen: list[str] = []
    slot = _slot(client_for(fake), number, None, seen)
    slot.write(_body("state: implementing"))
    slot.write(_body("state: watching"))
    comments = fake.issue(SLUG, number).comments
    ours = [c for c in comments if progress_marker(7) in c.body]
    assert len(ours) == 1 and seen == [str(ours[0].id)]
    assert ours[0].body.startswith("state: watching")
    assert ours[0].edits == [_body("state: implementing")]
    edits = [r for r in fake.requests if r.method == EDIT[fake.forge] and "comments" in r.path]
    edits += [r for r in fake.requests if r.method == "PUT" and "/notes/" in r.path]
    assert len(edits) == 1
    assert client_for(fake).list_comments(SLUG, number)[-1].id == str(ours[0].id)


def test_restart_finds_the_posted_comment_by_its_marker(fake: FakeForge) -> None:
    """A run that crashed after posting, before recording the id, edits the same comment."""
    number = fake.add_issue(SLUG, "progress", body="do it")
    _slot(client_for(fake), number, None, []).write(_body("before the crash"))
    seen: list[str] = []
    _slot(client_for(fake), number, None, seen).write(_body("after the restart"))
    ours = [c for c in fake.issue(SLUG, number).comments if progress_marker(7) in c.body]
    assert len(ours) == 1 and ours[0].body.startswith("after the restart")
    assert seen == [str(ours[0].id)]


def test_local_tracker_edits_its_comment(store: Store) -> None:
    """The local tracker posts and edits the progress comment in the store's issue comments."""
    store.ensure_repo("alpha")
    issue = store.add_local_issue("alpha", "do it", "body", labels=("ready-for-agent",))
    tracker = LocalTracker(TrackerSettings(name="local", kind="local"), store, {"alpha": "alpha"})
    seen: list[str] = []
    slot = CommentSlot(tracker, ("alpha", issue.id), 7, None, remember=seen.append)
    slot.write(_body("one"))
    again = CommentSlot(tracker, ("alpha", issue.id), 7, None, remember=seen.append)
    again.write(_body("two"))
    bodies = [c.body for c in store.local_comments(issue.id)]
    assert bodies == [_body("two")] and seen[0] == seen[1]


def test_paced_writes_coalesce_and_end_with_the_final_state(fake: FakeForge) -> None:
    """Many changes make few writes, spaced by the interval, the last one the final state."""
    number = fake.add_issue(SLUG, "progress", body="do it")
    view = ProgressView(7, "https://afk.example/runs/7")
    progress = ProgressComment(view, _slot(client_for(fake), number, None, []), interval_s=0.5)
    for step in range(40):
        progress.observe("agent", f"step {step}")
    progress.observe("update", "", {"pushed_sha": "abc123"})
    progress.close("succeeded", "all done")
    progress.join(60)
    writes = [r for r in fake.requests if r.method in ("POST", "PATCH", "PUT")]
    assert 1 <= len(writes) <= 3, [r.path for r in writes]
    gaps = [b.at - a.at for a, b in itertools.pairwise(writes)]
    assert all(gap >= 0.5 for gap in gaps), gaps
    (ours,) = fake.issue(SLUG, number).comments
    assert "succeeded" in ours.body and "`abc123`" in ours.body and "step 39" in ours.body
