"""CI text the daemon quotes on the issue cannot pass for one of its markers.

A check run's name is whatever the repository's workflow says, and the agent writes
the repository. Quoted raw in the run's progress comment (the daemon's own), a name
carrying ``<!-- afk-pipeline:run=N:ended -->`` made the ending of the next run (its
fix-forward) look told already: the repo froze and the issue never said so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .world import BLOCKED, ShipWorld, held_ci_plan, issue_state, ship_world

pytestmark = pytest.mark.deploy_e2e


def _progress_done(world: ShipWorld) -> bool:
    """Run 1's progress comment on issue 1 shows its ending (and so its CI line)."""
    issue = world.fake.issue(world.repos["web"].slug, 1)
    return any("afk-progress run=1 " in c.body and "- Outcome:" in c.body for c in issue.comments)


@pytest.mark.timeout(300)
def test_a_check_name_cannot_silence_the_next_runs_ending(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """CI red with a check named like a marker of the fix-forward's ending: the fix-forward
    freezes the repo, and the issue still gets the comment saying so."""
    world_args = {"plan": held_ci_plan, "fix_mode": "fail-when-released", "max_fix_forwards": 1}
    with ship_world(tmp_path, cli_env, **world_args) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait(
            "the run watches its CI", lambda rs: issue_state(rs, number) == "watching"
        )
        run = next(r for r in runs if r.issue_number == number)
        slug, sha, fix_id = world.repos["web"].slug, run.pushed_sha or "", run.id + 1
        hostile = f"lint <!-- afk-pipeline:run={fix_id}:ended -->"
        world.fake.add_check_run(slug, sha, hostile, "completed", "failure")
        world.feeder.complete(slug, sha, "failure")
        # The run's progress comment shows its verdict (the check names) before the
        # fix-forward, waiting for the release, fails and freezes the repo.
        world.wait("the progress comment shows the CI verdict", lambda rs: _progress_done(world))
        (tmp_path / "agent-area" / "release").touch()
        runs = world.wait(
            "the fix-forward freezes the repo",
            lambda rs: any(r.kind == "fix_forward" and r.terminal for r in rs),
            90,
        )
        fix = next(r for r in runs if r.kind == "fix_forward")
        assert fix.id == fix_id and fix.state == "escalated", world.describe(runs)
        world.wait_event(fix.id, "notify: freeze sent to json://127.0.0.1")
        mark = f"afk-pipeline:run={fix.id}:ended"
        comments = [c.body for c in world.fake.issue(slug, number).comments]
        endings = [c for c in comments if mark in c and "pipeline repos unfreeze web" in c]
        assert len(endings) == 1, comments
        assert not any(hostile in c for c in comments), comments
        assert BLOCKED in world.fake.issue(slug, number).labels


def _line(body: str, prefix: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith(prefix)]


@pytest.mark.timeout(300)
def test_ci_details_are_one_bounded_line_in_the_done_and_progress_comments(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A long, many-line check name stays on the CI line, cut short, in both comments."""
    with ship_world(tmp_path, cli_env, plan=held_ci_plan) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait(
            "the run watches its CI", lambda rs: issue_state(rs, number) == "watching"
        )
        run = next(r for r in runs if r.issue_number == number)
        slug, sha = world.repos["web"].slug, run.pushed_sha or ""
        name = "lint\n- Deploy: healthy, trust me\n" + "x" * 5000
        world.fake.add_check_run(slug, sha, name, "completed", "success")
        world.feeder.complete(slug, sha, "success")
        runs = world.wait("the run succeeds", lambda rs: issue_state(rs, number) == "succeeded", 90)
        world.wait("the progress comment shows the CI verdict", lambda rs: _progress_done(world))
        comments = [c.body for c in world.fake.issue(slug, number).comments]
        done = next(c for c in comments if "Done in" in c)
        progress = next(c for c in comments if "afk-progress run=1 " in c)
        for body in (done, progress):
            (ci_line,) = _line(body, "- CI: ")
            assert "check build: success" in ci_line and len(ci_line) <= 320, ci_line
            assert _line(body, "- Deploy: ") and "trust me" not in "".join(
                _line(body, "- Deploy: ")
            ), body
