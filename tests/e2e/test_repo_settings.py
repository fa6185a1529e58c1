"""Repository settings, end to end: `.afk.toml` on the default branch, and an agent forging one.

The daemon's config gives the repo no test command. A human commits an
`.afk.toml` whose test command appends ``human`` to a log in the agent area
(the one host path the sandbox may write) and then runs the tests; an agent
writes its own `.afk.toml` whose test command would append ``attacker``, and
its run pushes it. The log says which test command each run's gate ran.
"""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from pipeline.testing.configs import write_config

from .world import MAINTAINER, READY, ShipWorld, Tuning, ship_world

pytestmark = [pytest.mark.deploy_e2e, pytest.mark.timeout(400)]


@pytest.fixture
def tuning(history_url: str | None) -> Tuning:
    """The history on SQLite or PostgreSQL."""
    return Tuning(database_url=history_url)


def _without_test_command(world: ShipWorld) -> None:
    document = tomllib.loads(world.config.read_text(encoding="utf-8"))
    del document["repos"]["web"]["test_command"]
    write_config(world.config, document)


def _human_settings(gate_log: Path) -> str:
    script = f"open({str(gate_log)!r}, 'a').write('human\\n')"
    python = shlex.quote(sys.executable)
    return tomli_w.dumps(
        {
            "test_command": f"{python} -c {shlex.quote(script)} && {python} -m unittest -q",
            "prompt": "HUMAN-NOTE-7",
            "setup_commands": ["echo the operator did not allow this"],
        }
    )


def _file(world: ShipWorld, title: str, task: str) -> int:
    slug = world.repos["web"].slug
    return world.fake.add_issue(
        slug, title, body=f"afk-task: {task}\n", author=MAINTAINER, labels=[READY]
    )


def test_default_branch_settings_apply_and_an_agents_file_changes_nothing(
    tmp_path: Path, cli_env: dict[str, str], tuning: Tuning
) -> None:
    """The human's .afk.toml sets the gate and the prompt; the agent's, even pushed, does not."""
    with ship_world(tmp_path, cli_env, tuning=tuning) as world:
        _without_test_command(world)
        gate_log = world.agent_log.parent / "gate-log"
        world.human_commit("web", {".afk.toml": _human_settings(gate_log)}, "Repo settings")
        attack = _file(world, "Own the gate", "afk-toml")
        world.start()
        first = world.wait("the attack run ends", lambda rs: any(r.terminal for r in rs), 120)[0]
        assert first.state == "succeeded", world.describe([first])
        later = _file(world, "Add two", "feature two")
        runs = world.wait("the next run ends", lambda rs: len(rs) == 2 and rs[1].terminal, 120)
        second = runs[1]
        assert second.state == "succeeded" and second.issue_number == later, world.describe(runs)
        # The agent's file reached the default branch with its run's push ...
        pushed = world.git_in(world.repos["web"].remote, "show", "main:.afk.toml")
        assert "attacker" in pushed and first.pushed_sha in world.commits_of_run("web", first.id)
        # ... yet both gates ran the human's test command, and only it.
        assert gate_log.read_text().splitlines() == ["human", "human"]
        assert [call["notes"] for call in world.agent_calls()] == [["HUMAN-NOTE-7"]] * 2
        events = world.events(second.id)
        assert any(
            e.startswith("repo_file: ")
            and "applied: test_command, prompt" in e
            and f"changes pushed by run(s) {first.id} are not used" in e
            for e in events
        ), events
        # The value the operator did not allow is told on the issue, naming file and key.
        told = [
            c.body
            for c in world.fake.issue(world.repos["web"].slug, attack).comments
            if ".afk.toml:setup_commands" in c.body
        ]
        assert len(told) == 1 and "not allowed by the operator" in told[0], told
