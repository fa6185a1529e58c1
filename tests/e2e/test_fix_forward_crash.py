"""A daemon killed between queuing a fix-forward and ending the run whose deploy broke.

The fix-forward is queued first in line; the broken run's ending (``failed``,
``deploy_broken``, naming its fix-forward) is written after. Killed in between, the
restarted daemon finds the broken run's lease expired and puts it back in the queue,
beside its fix-forward. The fix-forward must not run before the run it heals has
ended: that run watches its commit again, ends broken naming the fix-forward, and only
then does the fix-forward heal the deploy and close the issue.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pipeline.store import Run

from .world import ShipWorld, ship_world

pytestmark = pytest.mark.deploy_e2e


def _ended(runs: list[Run]) -> bool:
    return len(runs) == 2 and all(r.terminal for r in runs)


def _event_ids(world: ShipWorld, run_id: int, kind: str) -> list[int]:
    return [e.id for e in world.store.run_events(run_id) if e.kind == kind]


@pytest.mark.timeout(300)
def test_fix_forward_waits_for_the_broken_runs_ending_after_a_crash(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with ship_world(tmp_path, cli_env, fix_mode="heal") as world:
        number = world.label("web", "Ask the backend for status", "break")
        killed = world.start(faults="fix_forward_queued")
        assert killed.wait(timeout=120) == -signal.SIGKILL, world.describe(world.runs())
        broken, fix = world.runs()
        assert fix.kind == "fix_forward" and fix.parent_id == broken.id, world.describe([broken])
        assert fix.state == "queued" and not broken.terminal and broken.pushed_sha
        world.start()
        runs = world.wait("both runs end after the restart", _ended, 120)
        broken, fix = runs
        assert broken.state == "failed" and broken.error_class == "deploy_broken", world.describe(
            runs
        )
        assert f"fix-forward run {fix.id}" in (broken.error or "")
        assert fix.state == "succeeded", world.describe(runs)
        # The fix-forward was claimed only after the broken run's ending was written.
        ending = max(_event_ids(world, broken.id, "state"))
        assert min(_event_ids(world, fix.id, "claimed")) > ending, world.describe(runs)
        assert world.remote_log("web")[:2] == [fix.pushed_sha, broken.pushed_sha]
        assert [c["run"] for c in world.agent_calls()] == [broken.id, fix.id]
        issue = world.fake.issue(world.repos["web"].slug, number)
        assert issue.state == "closed"
        assert sum(f"fix-forward run {fix.id}" in c.body for c in issue.comments) == 1


@pytest.mark.timeout(300)
def test_a_fix_forward_left_with_nothing_to_heal_calls_no_agent(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Killed after queuing the fix-forward; a human fixes the deploy before the restart.
    The broken run, watched again first, is healthy and closes its issue; its fix-forward
    then ends without an agent and pushes nothing."""
    with ship_world(tmp_path, cli_env, fix_mode="heal") as world:
        number = world.label("web", "Ask the backend for status", "break")
        killed = world.start(faults="fix_forward_queued")
        assert killed.wait(timeout=120) == -signal.SIGKILL, world.describe(world.runs())
        broken, fix = world.runs()
        human = world.human_commit("web", {"lib.py": world.app_lib}, "Restore status by hand")
        world.start()
        runs = world.wait("both runs end after the restart", _ended, 120)
        broken, fix = runs
        assert broken.state == "succeeded", world.describe(runs)
        assert fix.state == "succeeded" and fix.pushed_sha is None, world.describe(runs)
        assert any("nothing to heal" in e for e in world.events(fix.id)), world.describe(runs)
        assert [c["run"] for c in world.agent_calls()] == [broken.id]
        assert world.remote_log("web")[:2] == [human, broken.pushed_sha]
        issue = world.fake.issue(world.repos["web"].slug, number)
        assert issue.state == "closed"
        assert sum("Done in" in c.body for c in issue.comments) == 1
