"""A maintainer labels the issue ready again after its run pushed and then escalated.

CI never reported on the pushed commit, so the run escalated with its change already
on the default branch. Labelling the issue ready again must do what the retry does
(``test_retry_after_push``): watch that commit again and say so on the issue, not
hand the issue to the agent a second time (a second implementation on top of the
first, and a second push when the agent changed anything).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .world import (
    BLOCKED,
    MAINTAINER,
    READY,
    escalated_after_push,
    second_run,
    ship_world,
    silent_ci_plan,
)

pytestmark = pytest.mark.deploy_e2e


@pytest.mark.timeout(300)
def test_relabel_of_a_pushed_run_watches_its_commit_again(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Escalated after its push (no CI appeared); CI fixed, the issue labelled ready again:
    the same commit is watched, the issue says so and closes, one commit on the remote."""
    with ship_world(tmp_path, cli_env, plan=silent_ci_plan) as world:
        number, first = escalated_after_push(world)
        slug = world.repos["web"].slug
        world.wait(
            "the ending is told on the issue",
            lambda rs: BLOCKED in world.fake.issue(slug, number).labels,
        )
        # A human fixes CI, which now reports on the commit; then labels the issue again.
        world.fake.add_check_run(slug, first.pushed_sha, "build", "completed", "success")
        world.fake.apply_label(slug, number, READY, MAINTAINER)
        runs, again = second_run(world, number, "the relabelled run ends")
        assert again.state == "succeeded", world.describe(runs)
        assert again.pushed_sha == first.pushed_sha
        assert len(world.agent_calls()) == 1, world.agent_calls()
        by_runs = world.remote_log("web", "%H %(trailers:key=Afk-Run,valueonly,separator=%x2C)")
        ours = [e.split() for e in by_runs if len(e.split()) > 1]
        assert ours == [[first.pushed_sha, str(first.id)]], by_runs  # one commit of a run
        assert world.remote_log("web")[0] == first.pushed_sha
        issue = world.fake.issue(slug, number)
        told = [c.body for c in issue.comments if c.body.startswith(f"Labelled `{READY}` again")]
        assert len(told) == 1 and f"run {first.id}" in told[0], [c.body for c in issue.comments]
        assert issue.state == "closed" and BLOCKED not in issue.labels
