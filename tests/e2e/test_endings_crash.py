"""An ending cut short still reaches a human: ``pipeline run`` against the fake GitHub.

A daemon killed with SIGKILL after a run ended (before the ending was told,
with the ending comment reserved but not posted, or before the notification
was queued) is restarted: the issue then has exactly one ending comment, the
receiver exactly one notification, and the run's progress comment shows its
final state. A daemon stopped gracefully right after a run ended writes that
final state before it exits. Everything is read from outside the daemon.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.core.faults import ENDING_CHECKPOINTS
from pipeline.run.progress import progress_marker
from pipeline.store import Run

from .conftest import stop_daemon
from .world import ShipWorld, Tuning, ship_world

pytestmark = pytest.mark.timeout(300)


def _blocked_run(world: ShipWorld, number: int) -> Run:
    """The issue's run once it has ended (the agent stops blocked at once)."""

    def ended(runs: list[Run]) -> bool:
        return any(r.issue_number == number and r.terminal for r in runs)

    runs = world.wait("the run ends", ended, timeout_s=120)
    run = next(r for r in runs if r.issue_number == number)
    assert (run.state, run.error_class) == ("escalated", "blocked"), world.describe(runs)
    return run


def _comments(world: ShipWorld, number: int, mark: str) -> list[str]:
    issue = world.fake.issue(world.repos["web"].slug, number)
    return [c.body for c in issue.comments if mark in c.body]


def _state_of(body: str) -> str:
    """The state in a progress comment's first line (``**afk-pipeline run 3: testing**``)."""
    return body.splitlines()[0].rsplit(": ", 1)[1].rstrip("*")


def _eventually(
    world: ShipWorld, what: str, probe: Callable[[], object], timeout_s: float = 90
) -> None:
    """Wait until ``probe()`` is true; fail with the runs and the daemons' logs."""
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached\n" + world.describe(world.runs()))
        time.sleep(0.25)


def _progress_is_final(world: ShipWorld, number: int, run: Run) -> bool:
    bodies = _comments(world, number, progress_marker(run.id))
    return len(bodies) == 1 and _state_of(bodies[0]) == run.state


@pytest.mark.parametrize("checkpoint", ENDING_CHECKPOINTS)
def test_a_kill_after_the_run_ended_still_tells_once(
    tmp_path: Path, cli_env: dict[str, str], history_url: str | None, checkpoint: str
) -> None:
    """Killed as the ending is told: after the restart, one ending comment, one notification,
    and the progress comment at the run's final state."""
    with ship_world(tmp_path, cli_env, tuning=Tuning(database_url=history_url)) as world:
        number = world.label("web", "Do the impossible", "impossible")
        killed = world.start(faults=checkpoint)
        assert killed.wait(timeout=120) == -signal.SIGKILL, world.describe(world.runs())
        run = _blocked_run(world, number)
        world.start()
        ended = f"afk-pipeline:run={run.id}:ended"
        _eventually(world, "the ending comment", lambda: _comments(world, number, ended))
        _eventually(world, "the notification", lambda: world.receiver.received)
        _eventually(world, "the final progress", lambda: _progress_is_final(world, number, run))
        world.wait_event(run.id, "notify: escalation sent", timeout_s=60)
        assert len(_comments(world, number, ended)) == 1, _comments(world, number, "afk-")
        notices = [n.body.decode() for n in world.receiver.received]
        assert len(notices) == 1 and f"run {run.id} escalated (blocked)" in notices[0], notices


def test_a_graceful_stop_writes_the_final_progress(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """SIGTERM right after a run ended: the daemon exits with the progress comment final."""
    with ship_world(tmp_path, cli_env) as world:
        number = world.label("web", "Do the impossible", "impossible")
        daemon = world.start()
        run = _blocked_run(world, number)
        assert stop_daemon(daemon) == 0, world.describe(world.runs())
        (body,) = _comments(world, number, progress_marker(run.id))
        assert _state_of(body) == "escalated", body
        assert "- Outcome: blocked: " in body, body
