"""``pipeline run`` against a forge whose labels are not what the daemon first saw.

On Gitea an admin deletes and makes again the labels the daemon uses (they get new
ids) while it runs: the next issue is still labelled ``agent-working`` and loses
``ready-for-agent`` when claimed, and is labelled as its ending says.
"""

from __future__ import annotations

from pathlib import Path

from .forge_world import READY, SLUG, WORKING, ForgeWorld, forge_world

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


def _labels(world: ForgeWorld, number: int) -> list[str]:
    with world.fake.lock:
        return list(world.fake.issue(SLUG, number).labels)
