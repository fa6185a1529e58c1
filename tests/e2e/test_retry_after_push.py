"""The retry a human is told to run after a watch that found no verdict.

CI never reported on the pushed commit, so the run escalated and its ending said
``pipeline runs retry N``. The change is already on the default branch: the
retry must watch that commit again, not hand the issue to an agent a second
time (which would do the change again on top of itself and push it twice).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .world import BLOCKED, escalated_after_push, second_run, ship_world, silent_ci_plan

pytestmark = pytest.mark.deploy_e2e


@pytest.mark.timeout(300)
def test_retry_of_a_pushed_run_watches_its_commit_again(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Escalated after its push (no CI appeared); CI fixed, retried: the same commit is
    watched, the issue closes, the agent ran once and the change was pushed once."""
    with ship_world(tmp_path, cli_env, plan=silent_ci_plan) as world:
        number, first = escalated_after_push(world)
        slug = world.repos["web"].slug
        marker = f"afk-pipeline:run={first.id}:ended"

        def endings() -> list[str]:
            return [c.body for c in world.fake.issue(slug, number).comments if marker in c.body]

        world.wait("the ending is told on the issue", lambda rs: bool(endings()))
        ending = endings()[0]
        assert f"pipeline runs retry {first.id}" in ending
        assert "label the issue" not in ending, ending  # a new run would do the change again
        # A human fixes CI, which now reports on the commit; then retries as told.
        world.fake.add_check_run(slug, first.pushed_sha, "build", "completed", "success")
        world.cli("runs", "retry", str(first.id))
        runs, retried = second_run(world, number, "the retry ends")
        assert retried.state == "succeeded", world.describe(runs)
        assert retried.pushed_sha == first.pushed_sha
        assert len(world.agent_calls()) == 1, world.agent_calls()
        assert world.commits_of_run("web", first.id) == [first.pushed_sha]
        assert world.commits_of_run("web", retried.id) == []
        assert world.remote_log("web")[0] == first.pushed_sha
        issue = world.fake.issue(slug, number)
        assert issue.state == "closed" and BLOCKED not in issue.labels
