"""A red CI that a re-run turned green is no reason to freeze the repo.

The fix-forward of a flaky red CI finds nothing to change. It used to escalate
and freeze the repo, calling a human about a commit whose CI was green by then.
Before freezing for "nothing to change", the broken commit's CI is looked at
again: green now, the run ends healed and the issue says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .world import BLOCKED, held_ci_plan, issue_state, rerun_green, ship_world

pytestmark = pytest.mark.deploy_e2e


@pytest.mark.timeout(300)
def test_fix_forward_with_nothing_to_change_ends_healed_when_ci_reran_green(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """CI red, the fix-forward changes nothing, the CI re-run is green: healed, not frozen."""
    world_args = {"plan": held_ci_plan, "fix_mode": "nothing-when-released"}
    with ship_world(tmp_path, cli_env, **world_args) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait(
            "the run watches its CI", lambda rs: issue_state(rs, number) == "watching"
        )
        run = next(r for r in runs if r.issue_number == number)
        slug, sha = world.repos["web"].slug, run.pushed_sha or ""
        world.feeder.complete(slug, sha, "failure")
        world.wait("the fix-forward starts", lambda rs: any(r.kind == "fix_forward" for r in rs))
        rerun_green(world, sha)
        (tmp_path / "agent-area" / "release").touch()
        runs = world.wait(
            "the fix-forward ends",
            lambda rs: any(r.kind == "fix_forward" and r.terminal for r in rs),
            90,
        )
        fix = next(r for r in runs if r.kind == "fix_forward")
        assert fix.state == "succeeded", world.describe(runs)
        assert len([r for r in runs if r.kind == "fix_forward"]) == 1
        record = world.store.get_repo("web")
        assert record is not None and not record.frozen
        assert world.store.list_escalations("web") == []
        issue = world.fake.issue(slug, number)
        done = [c.body for c in issue.comments if "Done in" in c.body]
        assert issue.state == "closed" and BLOCKED not in issue.labels, done
        assert len(done) == 1 and "re-run" in done[0], done
        # It pushed nothing: its summary (`pipeline runs show`, the API) says what it did.
        assert fix.pushed_sha is None and fix.summary is not None
        assert fix.summary.startswith(f"nothing to change; watched {sha[:12]}"), fix.summary
        assert "pushed" not in fix.summary, fix.summary


@pytest.mark.timeout(300)
def test_fix_forward_with_nothing_to_change_still_freezes_when_ci_is_still_red(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """CI red, the fix-forward changes nothing, CI still red: the repo freezes as before."""
    world_args = {"plan": held_ci_plan, "fix_mode": "nothing-when-released"}
    with ship_world(tmp_path, cli_env, **world_args) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait(
            "the run watches its CI", lambda rs: issue_state(rs, number) == "watching"
        )
        run = next(r for r in runs if r.issue_number == number)
        world.feeder.complete(world.repos["web"].slug, run.pushed_sha or "", "failure")
        world.wait("the fix-forward starts", lambda rs: any(r.kind == "fix_forward" for r in rs))
        (tmp_path / "agent-area" / "release").touch()
        runs = world.wait(
            "the fix-forward ends",
            lambda rs: any(r.kind == "fix_forward" and r.terminal for r in rs),
            90,
        )
        fix = next(r for r in runs if r.kind == "fix_forward")
        assert fix.state == "escalated" and fix.error_class == "no_change", world.describe(runs)
        record = world.store.get_repo("web")
        assert record is not None and record.frozen
