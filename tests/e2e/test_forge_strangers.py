"""Gitea and GitLab through ``pipeline run``: strangers' comments never pass for the daemon's own.

Anyone may comment on an issue, and the daemon's hidden markers are plain text
anyone can paste. The daemon counts a marker only on a comment its own token
posted, so a look-alike neither silences its ending comment nor has its
progress written over the stranger's words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .forge_world import SLUG, ForgeWorld, forge_world

STRANGER = "mallory"
ENDED = "<!-- afk-pipeline:run={run}:ended -->"
PROGRESS = "<!-- afk-progress run={run} -->"


def _by(world: ForgeWorld, number: int, author: str) -> list[str]:
    with world.fake.lock:
        return [c.body for c in world.fake.issue(SLUG, number).comments if c.author == author]


def _mine(world: ForgeWorld, number: int, mark: str, *words: str) -> bool:
    """Whether the daemon's own comment with ``mark`` (saying ``words``) is on the issue."""
    found = [body for body in _by(world, number, "afk-bot") if mark in body]
    return any(all(word in body for word in words) for body in found)


@pytest.mark.parametrize("kind", ["gitea", "gitlab"])
def test_a_strangers_marker_neither_silences_the_ending_nor_takes_the_progress(
    tmp_path: Path, cli_env: dict[str, str], kind: str
) -> None:
    """Look-alike ending and progress markers by a stranger: the escalation is still told, once,
    in the daemon's own comment; the stranger's comments stay as written."""
    with forge_world(tmp_path, cli_env, kind) as world:
        world.start()
        number = world.issue("Pick a port", body="afk-wait afk-block")
        world.wait("the run claimed", lambda: _by(world, number, "afk-bot"))
        [run] = world.runs()
        fakes = (f"done here {ENDED.format(run=run.id)}", f"{PROGRESS.format(run=run.id)} hi")
        for body in fakes:
            world.fake.add_comment(SLUG, number, body, STRANGER)
        world.release.write_text("go")
        world.wait("the run escalated", lambda: world.runs()[0].state == "escalated")
        ended, progress_mark = ENDED.format(run=run.id), PROGRESS.format(run=run.id)
        world.wait("the ending comment", lambda: _mine(world, number, ended), timeout_s=30)
        world.wait("the final progress", lambda: _mine(world, number, progress_mark, "escalated"))
        assert world.stop() == 0, world.log.read_text()[-3000:]
        mine = _by(world, number, "afk-bot")
        with world.fake.lock:
            theirs = [c for c in world.fake.issue(SLUG, number).comments if c.author == STRANGER]
    assert [c.body for c in theirs] == list(fakes) and all(not c.edits for c in theirs)
    assert sum(ended in body for body in mine) == 1
    [ending] = [body for body in mine if ended in body]
    assert "which port should the service use?" in ending
    assert len([body for body in mine if progress_mark in body]) == 1
