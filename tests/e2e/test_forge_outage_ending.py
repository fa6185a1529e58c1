"""``pipeline run`` against a Gitea or GitLab that fails while the daemon tells an ending.

The change is on the default branch and healthy whatever the forge answers
afterwards: a forge down while the daemon posts "Done" neither turns the run
into a retry or a failure nor calls a human; the issue is resolved, once, when
the forge is back. An issue deleted while its run works gets no comment, and
its ending still reaches the humans' notification channel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git

from .forge_world import SLUG, WORKING, ForgeWorld, forge_world

DONE = "<!-- afk-pipeline:run={run}:resolved -->"


@pytest.mark.parametrize("kind", ["gitea", "gitlab"])
def test_a_forge_outage_at_done_leaves_the_run_succeeded_and_resolves_once(
    tmp_path: Path, cli_env: dict[str, str], kind: str
) -> None:
    """Every comment post fails for a while after the push: one attempt, succeeded; then the
    issue gets one "Done" comment, loses ``agent-working`` and is closed."""
    with forge_world(tmp_path, cli_env, kind) as world:
        world.start()
        number = world.issue("Write notes", body="afk-wait")
        world.wait("the claim comment", lambda: world.comments(number))
        world.fake.inject(r"/issues/\d+/(comments|notes)$", status=503, method="POST", times=12)
        world.release.write_text("go")
        world.wait("the run ended", lambda: world.runs()[0].finished_at is not None)
        [run] = world.runs()
        assert (run.state, run.attempt, run.error_class) == ("succeeded", 1, None), run.error
        world.wait("the issue closed", lambda: world.fake.issue(SLUG, number).state == "closed")
        assert world.stop() == 0, world.log.read_text()[-3000:]
        issue = world.fake.issue(SLUG, number)
    assert sum(DONE.format(run=run.id) in c.body for c in issue.comments) == 1
    assert WORKING not in issue.labels and "agent-blocked" not in issue.labels
    remote = tmp_path / "remote.git"
    assert git(remote, "rev-parse", "main").strip() == run.pushed_sha


@pytest.mark.parametrize("kind", ["gitea", "gitlab"])
def test_an_issue_deleted_mid_run_still_has_its_ending_told_to_the_humans(
    tmp_path: Path, cli_env: dict[str, str], kind: str
) -> None:
    """The issue is deleted while its agent works: the run's ending, which no issue can carry
    any more, is still sent to the notification channel, once."""
    with forge_world(tmp_path, cli_env, kind) as world:
        world.start()
        number = world.issue("Pick a port", body="afk-wait afk-block")
        world.wait("the claim comment", lambda: world.comments(number))
        with world.fake.lock:
            del world.fake.repos[SLUG].issues[number]
        world.release.write_text("go")
        world.wait("the run ended", lambda: world.runs()[0].finished_at is not None)
        [run] = world.runs()
        world.wait("the notification", lambda: world.receiver.received, timeout_s=30)
        world.wait("the gone issue noted", lambda: _gone_noted(world, run.id), timeout_s=30)
        assert world.stop() == 0, world.log.read_text()[-3000:]
    [notification] = world.receiver.received
    assert f"run {run.id}" in str(notification.json()) and run.state == "escalated"


def _gone_noted(world: ForgeWorld, run_id: int) -> bool:
    """Whether the run's timeline says its issue is gone (so the ending pass is done with it)."""
    return any("the issue is gone" in e.message for e in world.store.run_events(run_id))
