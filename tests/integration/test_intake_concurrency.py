"""Concurrent list requests in a poll cycle keep every guarantee of one-at-a-time polling."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.testing.forges import FakeGitHub
from pipeline.testing.intake_world import IntakeWorld
from pipeline.trackers import HttpOptions

READY = "ready-for-agent"
SLUGS = [f"acme/r{n}" for n in range(4)]
POLL_S = 10.0


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    forge = FakeGitHub(token="fake-token")
    for slug in SLUGS:
        forge.add_repo(slug)
        forge.set_permission(slug, "alice", "write")
    with forge:
        yield forge


def test_lists_fetched_after_a_failed_one_are_processed_next_poll(
    fake: FakeGitHub, database_url: str, tmp_path: Path
) -> None:
    """The first repo's list fails (5xx, answered late) while the others were fetched at the
    same time: the cycle fails at the first repo, and on the next poll, where the forge
    answers the others 304, their ready issues are queued all the same."""
    for slug in SLUGS[1:]:
        fake.add_issue(slug, "ready", labels=[READY])
    world = IntakeWorld.build(
        database_url,
        tmp_path / "volume",
        {"github": fake},
        [("github", slug) for slug in SLUGS],
        poll_interval_s=POLL_S,
        poll_concurrency=4,
        options=HttpOptions(timeout_s=30.0, mutation_spacing_s=0.0),
    )
    try:
        fake.inject(rf"/repos/{SLUGS[0]}/issues$", status=503, delay_s=1.0)
        report = world.intake.poll("github")
        assert report.error is not None and "503" in report.error
        lists = [p for p in fake.paths("GET") if p.endswith("/issues")]
        assert sorted(lists) == sorted(f"/repos/{slug}/issues" for slug in SLUGS)
        assert world.runs() == []
        world.clock.advance(POLL_S + 1)
        before = len(fake.requests)
        report = world.intake.poll("github")
        assert report.error is None and report.enqueued == 3
        statuses = [r.status for r in fake.requests[before:] if r.path.endswith("/issues")]
        assert sorted(statuses) == [200, 304, 304, 304]
        assert len(world.runs()) == 3
    finally:
        world.close()
