"""Intake under injected forge faults: it keeps polling, waits as told, never comments twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.forges import FORGES, WRITER
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld, WorldKnobs
from pipeline.trackers import HttpOptions

from .conftest import READY, SLUG, intake_over
from .test_intake import queued_numbers, untrusted_comments

POLL_S = 10.0
TIMEOUT_S = 1.0
LIST = r"/issues$"
LABELLER = {"github": r"/events$", "gitea": r"/timeline$", "gitlab": r"/resource_label_events$"}
COMMENT = {"github": r"/comments$", "gitea": r"/comments$", "gitlab": r"/notes$"}


def fault(name: str, now: float) -> tuple[dict[str, Any], float]:
    """The ``inject`` arguments for fault ``name`` and the wait the intake must then keep."""
    reset = int(now) + 300
    faults: dict[str, tuple[dict[str, Any], float]] = {
        "5xx": ({"status": 503}, POLL_S),
        "timeout": ({"status": None, "delay_s": TIMEOUT_S * 2}, POLL_S),
        "429-retry-after": ({"status": 429, "headers": {"retry-after": "120"}}, 120.0),
        "403-reset": (
            {
                "status": 403,
                "headers": {
                    "x-ratelimit-remaining": "0",
                    "x-ratelimit-reset": str(reset),
                    "ratelimit-remaining": "0",
                    "ratelimit-reset": str(reset),
                },
            },
            300.0,
        ),
        "malformed-json": ({"status": 200, "body": '[{"number": 1, "title": '}, POLL_S),
    }
    return faults[name]


@pytest.fixture
def world_knobs() -> WorldKnobs:
    """Polled every ``POLL_S``; a request that hangs gives up after ``TIMEOUT_S``."""
    return {
        "poll_interval_s": POLL_S,
        "options": HttpOptions(timeout_s=TIMEOUT_S, mutation_spacing_s=0.0),
    }


def wait_out(world: IntakeWorld, fake: FakeForge, expected_wait_s: float) -> None:
    """Check the back-off is ``expected_wait_s``: nothing is sent before it, a poll after."""
    health = world.intake.health[fake.forge]
    assert health.not_before - world.clock.now == pytest.approx(expected_wait_s, abs=1.0)
    sent = len(fake.requests)
    world.clock.advance(expected_wait_s - 2)
    assert world.intake.poll(fake.forge).skipped
    assert len(fake.requests) == sent  # waiting costs the forge nothing
    world.clock.advance(3)


def settle(fake: FakeForge, number: int) -> None:
    """Let a request the client gave up on finish on the server (it may post a comment)."""
    deadline = time.monotonic() + 5 * TIMEOUT_S
    while time.monotonic() < deadline and not untrusted_comments(fake, number):
        time.sleep(0.05)


@pytest.mark.parametrize(
    "name", ["5xx", "timeout", "429-retry-after", "403-reset", "malformed-json"]
)
def test_fault_on_the_list_is_waited_out_then_polling_resumes(
    fake: FakeForge, world: IntakeWorld, name: str
) -> None:
    """After a failed list the tracker waits as retry-after/reset/back-off say, then catches up."""
    ready = fake.add_issue(SLUG, "ready", labels=[READY])
    sneaky = fake.add_issue(SLUG, "sneaky", labels=[READY], labelled_by="mallory")
    arguments, expected_wait_s = fault(name, world.clock.now)
    fake.inject(LIST, method="GET", **arguments)
    report = world.intake.poll(fake.forge)
    assert report.error is not None and world.runs() == []
    wait_out(world, fake, expected_wait_s)
    report = world.intake.poll(fake.forge)
    assert (report.enqueued, report.error) == (1, None)
    assert queued_numbers(world) == [ready]
    world.clock.advance(POLL_S)
    world.intake.poll(fake.forge)
    assert len(untrusted_comments(fake, sneaky)) == 1
    assert world.intake.metrics.poll_errors[fake.forge] == 1


@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("labeller", "5xx"),
        ("labeller", "429-retry-after"),  # a malformed one is the issue's: test_intake_issue_faults
        ("comment", "5xx"),
        ("comment", "timeout"),
        ("comment", "429-retry-after"),
    ],
)
def test_fault_while_deciding_is_retried_without_a_duplicate_comment(
    fake: FakeForge, world: IntakeWorld, where: str, name: str
) -> None:
    """A fault after the list was fetched is retried on the next poll (though the list is 304)."""
    ready = fake.add_issue(SLUG, "ready", labels=[READY])
    sneaky = fake.add_issue(SLUG, "sneaky", labels=[READY], labelled_by="mallory")
    arguments, expected_wait_s = fault(name, world.clock.now)
    if where == "labeller":
        fake.inject(LABELLER[fake.forge], method="GET", **arguments)
    else:
        fake.inject(COMMENT[fake.forge], method="POST", **arguments)
    assert world.intake.poll(fake.forge).error is not None
    if name == "timeout":
        settle(fake, sneaky)
    wait_out(world, fake, expected_wait_s)
    report = world.intake.poll(fake.forge)
    assert report.error is None and report.unchanged == 0  # the 304 list is processed again
    assert queued_numbers(world) == [ready]
    reports = []
    for _ in range(2):  # the comment changed the list once; then it is unchanged
        world.clock.advance(POLL_S)
        reports.append(world.intake.poll(fake.forge))
    assert reports[-1].unchanged == 1 and not any(r.enqueued or r.error for r in reports)
    assert len(untrusted_comments(fake, sneaky)) == 1


def test_one_failing_tracker_does_not_stop_another(database_url: str, tmp_path: Path) -> None:
    """A GitHub answering 500 backs off alone; Gitea and GitLab are polled and queue their work."""
    fakes: dict[str, FakeForge] = {name: cls(token="t") for name, cls in FORGES.items()}
    for name, forge in fakes.items():
        forge.set_permission(SLUG, "alice", WRITER[name])
        forge.add_issue(SLUG, f"on {name}", labels=[READY])
        forge.serve()
    fakes["github"].inject(LIST, status=500, times=100)
    world = IntakeWorld.build(
        database_url,
        tmp_path / "volume",
        fakes,
        [(name, SLUG) for name in fakes],
        poll_interval_s=POLL_S,
    )
    try:
        reports = {r.tracker: r for r in world.intake.poll_all()}
        assert reports["github"].error is not None
        assert (reports["gitea"].enqueued, reports["gitlab"].enqueued) == (1, 1)
        world.clock.advance(POLL_S / 2)
        again = {r.tracker: r for r in world.intake.poll_all()}
        assert again["github"].skipped and not again["gitea"].skipped
        assert len(world.runs()) == 2
    finally:
        world.close()
        for forge in fakes.values():
            forge.stop()


def test_a_hanging_tracker_does_not_hold_up_another_poll(database_url: str, tmp_path: Path) -> None:
    """While one tracker's poll waits out its timeout, another tracker's poll runs and queues."""
    fakes: dict[str, FakeForge] = {name: FORGES[name](token="t") for name in ("github", "gitea")}
    for name, forge in fakes.items():
        forge.set_permission(SLUG, "alice", WRITER[name])
        forge.add_issue(SLUG, f"on {name}", labels=[READY])
        forge.serve()
    fakes["github"].inject(LIST, status=None, delay_s=TIMEOUT_S * 3)
    world = IntakeWorld.build(
        database_url,
        tmp_path / "volume",
        fakes,
        [(name, SLUG) for name in fakes],
        options=HttpOptions(timeout_s=TIMEOUT_S, mutation_spacing_s=0.0),
    )
    hanging = threading.Thread(target=world.intake.poll, args=("github",))
    try:
        hanging.start()
        deadline = time.monotonic() + 5
        while not fakes["github"].requests and time.monotonic() < deadline:
            time.sleep(0.005)
        assert world.intake.poll("gitea").enqueued == 1
        assert hanging.is_alive()  # gitea did not wait for github's timeout
    finally:
        hanging.join(10)
        world.close()
        for forge in fakes.values():
            forge.stop()


def test_back_off_starts_from_the_trackers_own_poll_interval(
    fake: FakeForge, database_url: str, tmp_path: Path
) -> None:
    """A tracker polled every 5 s (the global default is hourly) backs off 5 s, then 10 s."""
    with intake_over(
        fake,
        SLUG,
        database_url,
        tmp_path / "volume",
        poll_interval_s=3600.0,
        tracker_poll_interval_s=5.0,
    ) as world:
        fake.inject(LIST, status=503, times=2)
        world.intake.poll(fake.forge)
        wait_out(world, fake, 5.0)
        assert world.intake.poll(fake.forge).error is not None
        wait_out(world, fake, 10.0)
        assert world.intake.poll(fake.forge).error is None
