"""Through ``pipeline run``: what the daemon quotes on an issue acts on nothing as the bot.

The agent is anyone's voice (the issue steers it), and so are the tests it writes. Its
question and its tests' output are quoted in the run's ending comment, posted with the
daemon's token: raw, ``@victim`` notified a stranger, ``other/repo#3`` left a
"referenced" back-link on another project's issue, and a line ``/close`` of the test
output, at the start of a line of the comment, was a GitLab quick action run with the
daemon's permissions. Read from the fake forge: the words are all there, readable, and
none of them is a mention, a reference or a command by the forges' rules.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .forge_world import SLUG, ForgeWorld, forge_world

BREAK = "\u200b"  # what the daemon puts after a sign: invisible, and no forge reads past it
ASK = "ask @victim and @org/team: may I /close this and other/repo#3, or #2 first?"
# A test suite that fails, printing lines a GitLab comment would run as quick actions.
RED_TESTS = (
    "printf '%s\\n' 'FAIL see other/repo#3 @victim' '/close' '/assign @victim' "
    "'  /label ~bug'; exit 1"
)
# GitLab's quick-action rule (lib/gitlab/quick_actions/extractor.rb): "/" and a name at
# the very start of a line. Mentions and references: a sign, then a name or a number.
COMMAND = re.compile(r"^/[a-z_]+", re.MULTILINE)
ACTIVE = re.compile(r"(?<![\w])@[\w-]|[#!][0-9]")


def _daemons(world: ForgeWorld, number: int) -> list[str]:
    with world.fake.lock:
        return [c.body for c in world.fake.issue(SLUG, number).comments if c.author == "afk-bot"]


def _escalated(world: ForgeWorld) -> bool:
    runs = world.runs()
    return bool(runs) and runs[0].state == "escalated"


def _ending(world: ForgeWorld, number: int, run_id: int) -> str:
    mark = f"afk-pipeline:run={run_id}:ended"
    world.wait("the ending comment", lambda: any(mark in b for b in _daemons(world, number)))
    return next(body for body in _daemons(world, number) if mark in body)


def _quoted_part(ending: str) -> str:
    """The ending comment without the daemon's own lines naming the issue and the run."""
    return "\n".join(line for line in ending.splitlines() if not line.startswith("Issue: "))


@pytest.mark.parametrize("kind", ["gitea", "gitlab"])
def test_an_agents_question_mentions_and_links_nothing(
    tmp_path: Path, cli_env: dict[str, str], kind: str
) -> None:
    with forge_world(tmp_path, cli_env, kind) as world:
        world.start()
        number = world.issue("Pick a port", body=f"afk-ask: {ASK}")
        world.wait("the run escalated", lambda: _escalated(world))
        ending = _ending(world, number, world.runs()[0].id)
        assert world.stop() == 0, world.log.read_text()[-3000:]
    assert f"> {ASK}" in ending.replace(BREAK, ""), ending  # quoted, readable
    quoted = _quoted_part(ending)
    assert ACTIVE.findall(quoted) == [], quoted
    assert "other/repo#3" not in quoted and "@victim" not in quoted


def test_red_test_output_runs_no_quick_action(tmp_path: Path, cli_env: dict[str, str]) -> None:
    with forge_world(tmp_path, cli_env, "gitlab") as world:
        with world.cli.config.open("a") as config:  # the config ends inside [repos.app]
            config.write(f"test_command = {json.dumps(RED_TESTS)}\nmax_fix_iterations = 0\n")
        world.start()
        number = world.issue("Write notes")
        world.wait("the run escalated", lambda: _escalated(world))
        ending = _ending(world, number, world.runs()[0].id)
        assert world.stop() == 0, world.log.read_text()[-3000:]
        comments = _daemons(world, number)
    assert "still red" in ending and "/assign @victim" in ending.replace(BREAK, ""), ending
    for body in comments:
        assert COMMAND.findall(body.replace("\r", "")) == [], body
        assert ACTIVE.findall(_quoted_part(body)) == [], body
