"""Dependencies between issues, end to end: the real daemon against fake GitHub.

Issues say ``Depends on #N``; the daemon starts none of them before its
dependencies are closed, shows why in ``pipeline runs list``, and reports a
cycle (or a reference it will not follow) on the issue once instead of looping.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from .world import MAINTAINER, READY, ShipWorld, Tuning, ship_world

pytestmark = [pytest.mark.deploy_e2e, pytest.mark.timeout(400)]

MakeWorld = Callable[..., ShipWorld]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine_url(request: pytest.FixtureRequest) -> str | None:
    """The history's database: SQLite in the world (None) or a fresh PostgreSQL one."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def make_world(
    tmp_path: Path, cli_env: dict[str, str], engine_url: str | None
) -> Iterator[MakeWorld]:
    """Builds the test's world on the test's engine; closes it afterwards."""
    with ExitStack() as stack:

        def build(**kw: Any) -> ShipWorld:
            tuning = replace(Tuning(), database_url=engine_url)
            return stack.enter_context(ship_world(tmp_path, cli_env, tuning=tuning, **kw))

        yield build


def _file(world: ShipWorld, title: str, body: str) -> int:
    """A maintainer files an issue, not labelled yet."""
    return world.fake.add_issue(world.repos["web"].slug, title, body=body, author=MAINTAINER)


def _label(world: ShipWorld, number: int) -> None:
    world.fake.apply_label(world.repos["web"].slug, number, READY, MAINTAINER)


def _wait_until(
    what: str, check: Callable[[], bool], world: ShipWorld, timeout_s: float = 60
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached\n" + world.describe(world.runs()))
        time.sleep(0.2)


def _waiting(world: ShipWorld) -> dict[int, str]:
    return {w.number: w.reason for w in world.store.waiting_issues("web")}


def _comments(world: ShipWorld, number: int, needle: str) -> list[str]:
    issue = world.fake.issue(world.repos["web"].slug, number)
    return [c.body for c in issue.comments if needle in c.body]


def _polls(world: ShipWorld) -> int:
    slug = world.repos["web"].slug
    return sum(1 for r in world.fake.requests if r.path == f"/repos/{slug}/issues")


def test_chain_labelled_in_reverse_runs_in_dependency_order(make_world: MakeWorld) -> None:
    """#3 depends on #2, #2 on #1, labelled 3, 2, 1: they run and land 1, 2, 3."""
    world = make_world()
    one = _file(world, "Add one", "afk-task: feature one\n")
    two = _file(world, "Add two", "Depends on #1\n\nafk-task: feature two\n")
    three = _file(world, "Add three", "Blocked by #2\n\nafk-task: feature three\n")
    world.start()
    _label(world, three)
    _wait_until("#3 waits", lambda: three in _waiting(world), world)
    _label(world, two)
    _wait_until("#2 waits", lambda: two in _waiting(world), world)
    listed = world.cli("runs", "list").stdout
    assert "waiting" in listed and "waits for #1 (open)" in listed, listed
    assert "waits for #2 (open)" in listed, listed
    assert world.runs() == []
    _label(world, one)
    runs = world.wait(
        "all three succeed",
        lambda rs: len(rs) == 3 and all(r.state == "succeeded" for r in rs),
        timeout_s=240,
    )
    assert [r.issue_number for r in runs] == [one, two, three], world.describe(runs)
    for earlier, later in itertools.pairwise(runs):
        assert earlier.finished_at and later.started_at and earlier.finished_at <= later.started_at
    # The remote's main, oldest first: one commit per run, in dependency order.
    landed = [sha for r in runs for sha in world.commits_of_run("web", r.id)]
    assert list(reversed(world.remote_log("web")[:3])) == landed
    assert _waiting(world) == {}
    assert "waiting" not in world.cli("runs", "list").stdout


def test_cycle_and_hostile_references_are_reported_once_and_nothing_runs(
    make_world: MakeWorld,
) -> None:
    """A cycle is told to each issue in it, a foreign or flooding body is told too; none runs."""
    world = make_world()
    first = _file(world, "First", "Depends on #2\n\nafk-task: feature first\n")
    second = _file(world, "Second", "Depends on #1\n\nafk-task: feature second\n")
    flood = "Depends on " + ", ".join(f"#{n}" for n in range(1, 400)) + "\n" + "blocked by " * 5000
    hostile = _file(
        world, "Hostile", flood + "\nDepends on evil/elsewhere#1\nafk-task: feature x\n"
    )
    for number in (first, second, hostile):
        _label(world, number)
    world.start()
    _wait_until(
        "every issue is told",
        lambda: all(_comments(world, n, "not started") for n in (first, second, hostile)),
        world,
    )
    seen = _polls(world)
    _wait_until("five more polls", lambda: _polls(world) >= seen + 5, world)
    for number in (first, second):
        told = _comments(world, number, "not started")
        assert len(told) == 1 and "dependency cycle" in told[0], told
    told = _comments(world, hostile, "not started")
    assert len(told) == 1 and "other repositories are not supported" in told[0], told
    assert world.runs() == [] and all(d.poll() is None for d in world.daemons)
    waiting = _waiting(world)
    assert "dependency cycle" in waiting[first] and "dependency cycle" in waiting[second]
    assert "unreadable dependencies" in waiting[hostile]
