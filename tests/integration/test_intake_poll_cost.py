"""Polls that cost nothing when nothing changed; start-up enrolment as a batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings
from pipeline.store import Store
from pipeline.testing.forges import FakeGitHub
from pipeline.testing.intake_world import IntakeWorld
from tests.integration.sql_log import StatementLog

READY = "ready-for-agent"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    forge = FakeGitHub(token="fake-token")
    with forge:
        yield forge


def _world(fake: FakeGitHub, url: str, tmp_path: Path, repos: int) -> IntakeWorld:
    slugs = [f"acme/r{n:03d}" for n in range(repos)]
    for slug in slugs:
        fake.add_issue(slug, "ready", labels=[READY])
        fake.set_permission(slug, "alice", "write")
    return IntakeWorld.build(
        url, tmp_path / f"volume{repos}", {"github": fake}, [("github", s) for s in slugs]
    )


def _forget_etags(world: IntakeWorld) -> None:
    """Make every list answer 200 with the same content, as a forge without ETags would."""
    for tracker in world.trackers.values():
        tracker.http._state.etags.clear()


def _cycle_cost(world: IntakeWorld, fake: FakeGitHub) -> tuple[int, list[str], int]:
    """(queries, writes, non-list forge calls) of one poll cycle."""
    calls = len(fake.paths())
    with StatementLog(world.store.engine) as log:
        report = world.intake.poll("github")
    assert report.error is None
    lists = [p for p in fake.paths()[calls:] if p.endswith("/issues")]
    return log.queries, log.writes, len(fake.paths()) - calls - len(lists)


def test_a_304_cycle_sends_one_read(fake: FakeGitHub, database_url: str, tmp_path: Path) -> None:
    """After the first poll queued everything, a cycle of 304s sends one read (the escalated
    runs a `/afk resume` comment may answer) and no write."""
    world = _world(fake, database_url, tmp_path, 5)
    try:
        assert world.intake.poll("github").enqueued == 5
        assert _cycle_cost(world, fake) == (1, [], 0)
    finally:
        world.close()


def test_an_unchanged_list_costs_one_read_whatever_the_repos(
    fake: FakeGitHub, database_url: str, tmp_path: Path
) -> None:
    """Unchanged lists answered in full: two reads per cycle at 3 and at 12 repos, no writes."""
    costs = []
    for repos in (3, 12):
        world = _world(fake, database_url, tmp_path, repos)
        try:
            world.intake.poll("github")
            _forget_etags(world)
            costs.append(_cycle_cost(world, fake))
        finally:
            world.close()
    assert costs == [(2, [], 0), (2, [], 0)]


def test_an_edited_issue_is_considered_again(
    fake: FakeGitHub, database_url: str, tmp_path: Path
) -> None:
    """An issue edited since the last poll is considered again; its title reaches the store."""
    world = _world(fake, database_url, tmp_path, 2)
    try:
        world.intake.poll("github")
        fake.edit_issue("acme/r001", 1, "alice", title="renamed")
        _, writes, calls = _cycle_cost(world, fake)
        assert writes and calls > 0
        titles = {run.issue_title for run in world.runs()}
        assert titles == {"ready", "renamed"}
    finally:
        world.close()


def test_start_up_enrolment_is_a_batch(database_url: str, tmp_path: Path) -> None:
    """Enrolling 300 repos takes a constant number of statements; a restart writes nothing."""
    store = Store(database_url)
    store.upgrade()
    repos = [
        RepoSettings(name=f"r{n}", tracker="github", slug=f"acme/r{n}", remote_url="x")
        for n in range(300)
    ]
    try:
        with StatementLog(store.engine) as first:
            store.sync_repos(repos)
        with StatementLog(store.engine) as again:
            store.sync_repos(repos)
        assert first.queries <= 3 and len(store.list_repos()) == 300
        assert again.writes == [] and again.queries == 1
    finally:
        store.close()
