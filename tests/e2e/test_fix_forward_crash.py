"""A daemon killed between queuing a fix-forward and ending the run whose deploy broke.

The fix-forward is queued first in line; the broken run's ending (``failed``,
``deploy_broken``, naming its fix-forward) is written after. Killed in between, the
restarted daemon finds the broken run's lease expired and puts it back in the queue,
beside its fix-forward. The fix-forward must not run before the run it heals has
ended: that run watches its commit again, ends broken naming the fix-forward, and only
then does the fix-forward heal the deploy and close the issue. A broken run that ends
otherwise on that second watch leaves its fix-forward nothing to do: healthy, it ends
succeeded; inconclusive (escalated), it ends cancelled as superseded. Either way no
agent is called and nothing is pushed.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pipeline.store import Run

from .world import BLOCKED, ShipWorld, Tuning, ship_world

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


def _ci_pending_again(world: ShipWorld, sha: str) -> None:
    """The commit's check runs are re-run and never finish: no CI verdict on a second watch."""
    with world.fake.lock:
        for run in world.fake.repos[world.repos["web"].slug].check_runs[sha]:
            run.status, run.conclusion = "in_progress", None


@pytest.mark.timeout(300)
def test_a_fix_forward_whose_broken_run_escalated_on_its_second_watch_never_runs(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Killed after queuing the fix-forward; the broken run's second watch is inconclusive
    (its CI re-runs and never finishes), so it escalates and a human is called. Its queued
    fix-forward was asked for by a verdict that no longer stands: it ends cancelled
    (superseded) without an agent, pushes nothing, freezes nothing, and the issue stays
    open and blocked, told why by both endings."""
    tuning = Tuning(ci_timeout_s=6)
    with ship_world(tmp_path, cli_env, fix_mode="heal", tuning=tuning) as world:
        number = world.label("web", "Ask the backend for status", "break")
        killed = world.start(faults="fix_forward_queued")
        assert killed.wait(timeout=120) == -signal.SIGKILL, world.describe(world.runs())
        broken, fix = world.runs()
        assert fix.kind == "fix_forward" and fix.state == "queued" and broken.pushed_sha
        _ci_pending_again(world, broken.pushed_sha)
        world.start()
        runs = world.wait("both runs end after the restart", _ended, 120)
        broken, fix = runs
        assert broken.state == "escalated", world.describe(runs)
        assert broken.error_class == "deploy_inconclusive", world.describe(runs)
        assert fix.state == "cancelled" and fix.error_class == "superseded", world.describe(runs)
        assert fix.pushed_sha is None and f"run {broken.id}" in (fix.error or "")
        assert any("superseded" in e for e in world.events(fix.id)), world.describe(runs)
        assert [c["run"] for c in world.agent_calls()] == [broken.id]
        assert world.remote_log("web")[0] == broken.pushed_sha
        assert world.commits_of_run("web", fix.id) == []
        repo = world.store.get_repo("web")
        assert repo is not None and not repo.frozen, world.describe(runs)
        slug = world.repos["web"].slug
        world.wait("both endings are told", lambda _: _told(world, slug, number, runs))
        issue = world.fake.issue(slug, number)
        assert issue.state == "open" and BLOCKED in issue.labels, issue.labels
        (escalated,) = [c.body for c in issue.comments if f"run={broken.id}:ended" in c.body]
        assert "inconclusive" in escalated and f"runs retry {broken.id}" in escalated, escalated
        assert sum("Done in" in c.body for c in issue.comments) == 0
        (told,) = [c.body for c in issue.comments if f"run={fix.id}:ended" in c.body]
        assert "superseded" in told and "nothing was pushed" in told, told
        assert f"pipeline runs retry {fix.id}" not in told, told


def _told(world: ShipWorld, slug: str, number: int, runs: list[Run]) -> bool:
    bodies = [c.body for c in world.fake.issue(slug, number).comments]
    return all(any(f"run={r.id}:ended" in b for b in bodies) for r in runs)
