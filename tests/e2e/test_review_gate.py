"""The review gate, end to end: a scripted reviewer (the command agent) before the push.

With ``review = true`` the reviewer reads the issue and the diff after the
tests are green; requested changes go back to the implementing agent and
what is pushed carries them; a reviewer that rejects twice escalates and the
remote stays as it was. The reviewer's tree is read-only.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline.run.progress import progress_marker
from pipeline.store import Run

from .world import BLOCKED, ShipWorld, Tuning, ship_world

pytestmark = pytest.mark.deploy_e2e

DOCSTRING = '"""Reviewed."""\n'


def _ended(world: ShipWorld, number: int) -> Run:
    def done(runs: list[Run]) -> bool:
        return any(r.issue_number == number and r.terminal for r in runs)

    runs = world.wait("the run ends", done, 180)
    return next(r for r in runs if r.issue_number == number)


def _progress(world: ShipWorld, number: int, run: Run) -> str:
    """The run's one progress comment, once it shows the run's final state."""
    issue = world.fake.issue(world.repos["web"].slug, number)
    deadline = time.monotonic() + 60
    while True:
        (body,) = [c.body for c in issue.comments if progress_marker(run.id) in c.body]
        if f": {run.state}**" in body.splitlines()[0]:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


@pytest.fixture
def tuning(history_url: str | None) -> Tuning:
    """The review gate on, the history on SQLite or PostgreSQL."""
    return Tuning(database_url=history_url, review=True)


def test_requested_change_is_made_before_the_push(
    tmp_path: Path, cli_env: dict[str, str], tuning: Tuning
) -> None:
    """The reviewer asks for a docstring; the implementer adds it; the pushed file has it."""
    with ship_world(tmp_path, cli_env, tuning=tuning) as world:
        number = world.label("web", "Add a reports helper", "reviewed reports")
        world.start()
        run = _ended(world, number)
        assert run.state == "succeeded", world.describe(world.runs())
        pushed = world.git_in(world.repos["web"].remote, "show", "main:reports.py")
        assert pushed.startswith(DOCSTRING), pushed
        calls = world.agent_calls()
        assert [c["review"] for c in calls] == [None, "refused", None, "refused"], calls
        events = world.events(run.id)
        assert any(e.startswith("review: review 1: changes requested: reports.py") for e in events)
        assert any(e.startswith("review: review 2: approved") for e in events), events
        progress = _progress(world, number, run)
        assert "- Review: review 2: approved: The module is documented." in progress, progress


def test_two_rejections_escalate_without_pushing(
    tmp_path: Path, cli_env: dict[str, str], tuning: Tuning
) -> None:
    """A reviewer that requests changes twice escalates the run; the remote is unchanged."""
    with ship_world(tmp_path, cli_env, tuning=tuning) as world:
        before = world.remote_log("web")
        number = world.label("web", "Add a reports helper", "rejected reports")
        world.start()
        run = _ended(world, number)
        assert run.state == "escalated" and run.error_class == "review_rejected", world.describe(
            world.runs()
        )
        assert world.remote_log("web") == before
        assert run.pushed_sha is None
        assert [c["review"] for c in world.agent_calls()] == [None, "refused", None, "refused"]
        progress = _progress(world, number, run)
        assert "- Review: review 2: changes requested: reports.py needs" in progress, progress
        assert "**afk-pipeline run" in progress and ": escalated**" in progress
        issue = world.fake.issue(world.repos["web"].slug, number)
        deadline = time.monotonic() + 60  # the ending is announced just after the run ends
        while True:
            endings = [c.body for c in issue.comments if progress_marker(run.id) not in c.body]
            if any("requested changes 2 times" in body for body in endings):
                break
            assert time.monotonic() < deadline, endings
            time.sleep(0.2)
        assert BLOCKED in issue.labels
