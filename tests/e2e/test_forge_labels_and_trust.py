"""``pipeline run`` against forges whose labels and members are not what the daemon first saw.

On Gitea an admin deletes and makes again the labels the daemon uses (they get new
ids) while it runs: the next issue is still labelled ``agent-working`` and loses
``ready-for-agent`` when claimed, and is labelled as its ending says. On GitLab the
maintainer who labels the issue is listed after more than a page of other members: the
issue is still worked on.
"""

from __future__ import annotations

from pathlib import Path

from .forge_world import MAINTAINER, READY, SLUG, WORKING, ForgeWorld, forge_world

BLOCKED = "agent-blocked"


def test_gitea_labels_made_again_under_a_running_daemon_still_apply(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """After the labels are deleted and made again, the second issue is labelled as usual:
    ``agent-working`` instead of ``ready-for-agent`` while it runs, ``agent-blocked`` after."""
    with forge_world(tmp_path, cli_env, "gitea") as world:
        world.release.write_text("go")
        world.start()
        first = world.issue("First notes")
        world.wait(
            "the first issue closed", lambda: world.fake.issue(SLUG, first).state == "closed"
        )
        for label in (READY, WORKING):
            world.fake.delete_label(SLUG, label)
            world.fake.create_label(SLUG, label)
        world.release.unlink()
        second = world.issue("Second notes", body="afk-wait")
        world.wait("agent-working on the second", lambda: _labels(world, second) == [WORKING])
        world.release.write_text("go")
        # The agent writes the same notes again: nothing to push, so the run is escalated.
        world.wait("the second told", lambda: _labels(world, second) == [BLOCKED])
        assert world.stop() == 0, world.log.read_text()[-3000:]
    assert [r.state for r in world.runs()] == ["succeeded", "escalated"]


def test_gitlab_maintainer_listed_beyond_the_first_page_is_trusted(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A maintainer after 120 other members whose names contain theirs has the issue done."""
    with forge_world(tmp_path, cli_env, "gitlab") as world:
        with world.fake.lock:
            permissions = world.fake.repos[SLUG].permissions
            permissions.pop(MAINTAINER)
            permissions.update({f"{MAINTAINER}{n:03d}": "10" for n in range(120)})
            permissions[MAINTAINER] = "40"
        world.start()
        number = world.issue("Write notes")
        world.wait("the issue closed", lambda: world.fake.issue(SLUG, number).state == "closed")
        assert world.stop() == 0, world.log.read_text()[-3000:]
    assert [r.state for r in world.runs()] == ["succeeded"]
    assert not any("not trusted" in body for body in world.comments(number))


def _labels(world: ForgeWorld, number: int) -> list[str]:
    with world.fake.lock:
        return list(world.fake.issue(SLUG, number).labels)
