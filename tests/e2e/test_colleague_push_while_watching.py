"""A colleague pushes to main while the daemon watches its own commit.

The deploy then reports the colleague's commit, which holds the run's: the run's
change is live. Taken for "not rolled out yet", the watch waited for a version
that would never come back, ran into its progress deadline and called a human
about a healthy deploy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.store import Run

from .conftest import ENDED
from .world import BLOCKED, held_ci_plan, issue_state, ship_world

pytestmark = pytest.mark.deploy_e2e


def _issue_run(runs: list[Run], number: int) -> Run:
    return next(r for r in runs if r.issue_number == number and r.kind == "issue")


def test_a_later_commit_deployed_on_top_counts_as_rolled_out(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Pushed, then a colleague's commit lands on top and is deployed: the run succeeds."""
    with ship_world(tmp_path, cli_env, plan=held_ci_plan) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait(
            "the run watches its CI",
            lambda rs: issue_state(rs, number) == "watching",
        )
        pushed = _issue_run(runs, number).pushed_sha
        theirs = world.human_commit("web", {"NOTES.md": "Release notes.\n"}, "Add release notes")
        assert pushed and world.remote_log("web")[:2] == [theirs, pushed]
        world.feeder.complete(world.repos["web"].slug, pushed)  # CI green, the deploy is theirs
        runs = world.wait("the run ends", lambda rs: issue_state(rs, number) in ENDED, 90)
        run = _issue_run(runs, number)
        assert run.state == "succeeded", world.describe(runs)
        assert world.store.list_escalations("web") == []
        issue = world.fake.issue(world.repos["web"].slug, number)
        assert issue.state == "closed" and BLOCKED not in issue.labels
        measured = [e for e in world.events(run.id) if e.startswith("deploy: measurement")]
        assert measured and all(e.endswith(": ok") for e in measured), world.events(run.id)
