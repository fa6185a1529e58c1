"""One issue whose label history cannot be read holds back only itself, never its tracker.

Anyone who may edit an issue can grow its history past the clients' page cap (a
title renamed thousands of times, a label churned), and a forge may answer one
issue's events with a body that is not what it documents. The other issues and
repos of the tracker are still queued in the same poll, the tracker is not backed
off, and the issue is read again on the next poll (though its list is unchanged).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.testing.forges import WRITER
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld, repo_name
from pipeline.trackers import HttpOptions

from .conftest import READY, SLUG

OTHER = "acme/gadgets"
POLL_S = 10.0
MAX_PAGES = 2  # the clients' page cap, small so a few hundred events run past it
# Each forge's label history of issue 1 (where ``label_event`` reads).
EVENTS_OF_1 = r"/issues/1/(events|timeline|resource_label_events)$"


@pytest.fixture
def two_repos(fake: FakeForge, database_url: str, tmp_path: Path) -> Iterator[IntakeWorld]:
    """``SLUG`` and ``OTHER`` enrolled on the one tracker, with a small page cap."""
    fake.set_permission(OTHER, "alice", WRITER[fake.forge])
    world = IntakeWorld.build(
        database_url,
        tmp_path / "volume",
        {fake.forge: fake},
        [(fake.forge, SLUG), (fake.forge, OTHER)],
        poll_interval_s=POLL_S,
        options=HttpOptions(timeout_s=5.0, mutation_spacing_s=0.0, max_pages=MAX_PAGES),
    )
    try:
        yield world
    finally:
        world.close()


def flood(fake: FakeForge, number: int, times: int) -> None:
    """The label taken off and put back ``times`` times: two events each."""
    for _ in range(times):
        fake.unlabel(SLUG, number, READY, "alice")
        fake.apply_label(SLUG, number, READY, "alice")


def queued(world: IntakeWorld) -> set[tuple[str, int]]:
    return {(run.repo_name, run.issue_number or 0) for run in world.runs()}


def reads_of(fake: FakeForge, number: int) -> int:
    """GETs of issue ``number`` of ``SLUG`` or anything under it."""
    return sum(1 for path in fake.paths("GET") if f"{SLUG}/issues/{number}/" in path)


@pytest.mark.parametrize("fault", ["past-the-page-cap", "malformed-events"])
def test_an_unreadable_issue_holds_back_no_other_issue_or_repo(
    fake: FakeForge,
    two_repos: IntakeWorld,
    fault: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stuck issue is passed over, named in a warning; the rest is queued in the same poll."""
    world = two_repos
    stuck = fake.add_issue(SLUG, "stuck", labels=[READY])
    fine = fake.add_issue(SLUG, "fine", labels=[READY])
    elsewhere = fake.add_issue(OTHER, "elsewhere", labels=[READY])
    if fault == "past-the-page-cap":
        flood(fake, stuck, 150)  # 301 events: past two pages on every forge
    else:
        fake.inject(EVENTS_OF_1, method="GET", status=200, body='[{"id": 1, "event": ', times=1)
    with caplog.at_level(logging.WARNING):
        report = world.intake.poll(fake.forge)
    mine, other = repo_name(fake.forge, SLUG), repo_name(fake.forge, OTHER)
    assert queued(world) == {(mine, fine), (other, elsewhere)}
    assert report.enqueued == 2 and not report.skipped
    assert world.intake.health[fake.forge].failures == 0  # the tracker is not backed off
    assert f"{mine}#{stuck}" in caplog.text  # the issue is named with why it was passed over
    asked = reads_of(fake, stuck)
    world.clock.advance(POLL_S)
    world.intake.poll(fake.forge)  # the lists are unchanged: the issue is still read again
    assert reads_of(fake, stuck) > asked
    if fault == "malformed-events":  # the forge answers it well now: it is queued
        assert (mine, stuck) in queued(world)
    else:  # failing again, it waits longer: the next poll does not read it
        assert (mine, stuck) not in queued(world)
        read = reads_of(fake, stuck)
        world.clock.advance(POLL_S / 2)
        world.intake.poll(fake.forge)
        assert reads_of(fake, stuck) == read
        assert world.intake.health[fake.forge].failures == 0
