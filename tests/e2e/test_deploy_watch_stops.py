"""A deploy watch stopped half-way (a cancel, the daemon's shutdown) is no verdict.

A command probe interrupted by the stop must not count as a failed measurement:
a cancel of a pushed run ends it ``cancelled`` (as during the CI watch), and a
shutdown leaves the run to lease recovery, so the restarted daemon watches the
same commit again. Neither queues a fix-forward, escalates or calls a human.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.store import Run

from .conftest import ENDED, stop_daemon
from .world import BLOCKED, ShipWorld, Tuning, issue_state, ship_world

pytestmark = pytest.mark.deploy_e2e


def _held_probe(root: Path) -> tuple[dict[str, Any], Path, Path]:
    """A command probe that says it started, then waits while the ``hold`` file exists."""
    started, hold = root / "probe-started", root / "probe-hold"
    script = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        f"while pathlib.Path({str(hold)!r}).exists():\n"
        "    time.sleep(0.05)\n"
    )
    probe = {"kind": "command", "command": [sys.executable, "-c", script], "timeout_s": 300}
    hold.touch()
    return probe, started, hold


def _issue_run(runs: list[Run], number: int) -> Run:
    return next(r for r in runs if r.issue_number == number and r.kind == "issue")


def _no_fix_forward_nor_human(world: ShipWorld, runs: list[Run], number: int) -> None:
    assert [r.id for r in runs if r.kind == "fix_forward"] == [], world.describe(runs)
    assert world.store.list_escalations("web") == [], world.describe(runs)
    assert len(world.agent_calls()) == 1, world.agent_calls()
    issue = world.fake.issue(world.repos["web"].slug, number)
    assert BLOCKED not in issue.labels


def test_cancel_during_a_deploy_probe_ends_cancelled(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Cancelled while its command probe runs: the run ends cancelled, nothing is fixed forward."""
    probe, started, _ = _held_probe(tmp_path)
    with ship_world(tmp_path, cli_env, tuning=Tuning(deploy_probes=(probe,))) as world:
        number = world.label("web", "Add a reports helper", "feature reports")
        world.start()
        world.wait("the deploy probe runs", lambda rs: started.exists())
        world.cli("runs", "cancel", str(_issue_run(world.runs(), number).id))
        runs = world.wait("the cancel lands", lambda rs: issue_state(rs, number) in ENDED)
        run = _issue_run(runs, number)
        assert run.state == "cancelled", world.describe(runs)
        assert not any("deploy broken" in e for e in world.events(run.id)), world.events(run.id)
        _no_fix_forward_nor_human(world, world.runs(), number)


@pytest.mark.timeout(300)
def test_shutdown_during_a_deploy_probe_watches_again_after_restart(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The daemon stopped while its command probe runs: after a restart the same commit is
    watched again and the run succeeds; nobody is called, nothing is fixed forward."""
    probe, started, hold = _held_probe(tmp_path)
    with ship_world(tmp_path, cli_env, tuning=Tuning(deploy_probes=(probe,))) as world:
        number = world.label("web", "Add a reports helper", "feature reports")
        first = world.start()
        world.wait("the deploy probe runs", lambda rs: started.exists())
        pushed = _issue_run(world.runs(), number).pushed_sha
        assert stop_daemon(first, timeout_s=120) == 0  # the grace passes, then the probe is stopped
        run = _issue_run(world.runs(), number)
        assert not run.terminal, world.describe(world.runs())
        hold.unlink()  # the deploy answers now
        world.start()
        runs = world.wait(
            "the run ends after the restart", lambda rs: issue_state(rs, number) in ENDED
        )
        run = _issue_run(runs, number)
        assert run.state == "succeeded" and run.pushed_sha == pushed, world.describe(runs)
        assert world.commits_of_run("web", run.id) == [pushed]
        _no_fix_forward_nor_human(world, runs, number)
