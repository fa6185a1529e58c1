"""A local issue a human withdraws is not implemented or pushed: `pipeline run`, local tracker.

The human closes (`pipeline issue close`) or unlabels (`pipeline issue unlabel`) a local
issue whose run waits in the queue behind another, or closes one whose agent is at work.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import CALC_PROJECT, Cli, local_config, stop_daemon

pytestmark = pytest.mark.timeout(300)


# Records each call's run, holds on while the issue's title says "Hold" until the test
# writes `release`, then adds one module named after its run.
AGENT = """
import os, pathlib, re, sys, time
prompt = pathlib.Path(sys.argv[1]).read_text()
wd = pathlib.Path(sys.argv[2])
area = pathlib.Path(os.environ["AGENT_AREA"])
area.mkdir(parents=True, exist_ok=True)
run = re.findall(r"Afk-Run: (\\d+)", prompt)[-1]
with open(area / "calls", "a") as calls:
    calls.write(run + "\\n")
deadline = time.monotonic() + 120
while "Hold" in prompt and not (area / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
(wd / f"run{run}.py").write_text("DONE = True\\n")
print("added a module")
"""
ENDED = {"succeeded", "failed", "escalated", "cancelled"}


@dataclass
class Local:
    """The daemon on the local tracker, its agent's area and its remote."""

    cli: Cli
    area: Path
    remote: str
    log: Path

    def add(self, title: str) -> int:
        added = self.cli.json(
            "issue", "add", "--repo", "calc", "--title", title, "--label", "ready-for-agent"
        )
        return int(added["id"])

    def run_of(self, number: int, states: set[str], daemon: Any) -> dict[str, Any]:
        def there(runs: list[dict[str, Any]]) -> bool:
            return any(r["issue_number"] == number and r["state"] in states for r in runs)

        runs = self.cli.wait_for(there, 120, daemon, self.log)
        return next(r for r in runs if r["issue_number"] == number and r["state"] in states)

    def calls(self) -> list[int]:
        path = self.area / "calls"
        return [int(line) for line in path.read_text().split()] if path.exists() else []

    def agent_started(self, run_id: int) -> None:
        self.cli.wait_for(lambda _: run_id in self.calls(), 60)

    def pushed_by(self, run_id: int) -> bool:
        return f"Afk-Run: {run_id}" in git(Path(self.remote), "log", "--format=%B", "main")

    def events(self, run_id: int) -> str:
        return str(self.cli("runs", "show", str(run_id)).stdout)


@pytest.fixture
def local(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[tuple[Local, Any]]:
    """The world and its running daemon, stopped afterwards."""
    remote = make_remote(tmp_path, CALC_PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    area = tmp_path / "volume" / "homes" / "calc" / "agent-area"
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    config = local_config(tmp_path, remote, argv, {"AGENT_AREA": str(area)})
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    world = Local(cli, area, remote, tmp_path / "daemon.log")
    holder: list[Any] = []
    try:
        yield world, holder
    finally:
        for daemon in holder:
            stop_daemon(daemon)


def _start(world: Local, holder: list[Any]) -> Any:
    daemon = world.cli.daemon(world.log)
    holder.append(daemon)
    return daemon


def _queued_behind(world: Local, holder: list[Any]) -> tuple[Any, int]:
    """Two labelled issues: the first's agent holds on, the second waits queued."""
    first = world.add("Hold on, add a module")
    second = world.add("Add another module")
    daemon = _start(world, holder)
    world.agent_started(world.run_of(first, {"implementing"}, daemon)["id"])
    world.run_of(second, {"queued"}, daemon)
    return daemon, second


def _withdrawn(world: Local, daemon: Any, number: int, why: str) -> dict[str, Any]:
    run = world.run_of(number, ENDED, daemon)
    assert (run["state"], run["error"]) == ("cancelled", f"cancelled: {why}"), run
    assert not world.pushed_by(run["id"])
    assert f"{why}: the run ends cancelled, nothing pushed" in world.events(run["id"])
    issue = next(i for i in world.cli.json("issue", "list", "--all") if i["id"] == number)
    assert "agent-working" not in issue["labels"]
    return run


def test_closed_while_queued(local: tuple[Local, list[Any]]) -> None:
    """`pipeline issue close` on a queued issue: its run ends cancelled, its agent never called."""
    world, holder = local
    daemon, second = _queued_behind(world, holder)
    world.cli("issue", "close", str(second))
    (world.area / "release").write_text("go\n")
    run = _withdrawn(world, daemon, second, f"issue #{second} was closed before the agent started")
    assert run["id"] not in world.calls()


def test_unlabelled_while_queued(local: tuple[Local, list[Any]]) -> None:
    """`pipeline issue unlabel` of the ready label on a queued issue: cancelled, never started."""
    world, holder = local
    daemon, second = _queued_behind(world, holder)
    world.cli("issue", "unlabel", str(second), "ready-for-agent")
    (world.area / "release").write_text("go\n")
    why = f"issue #{second} lost its `ready-for-agent` label before the agent started"
    run = _withdrawn(world, daemon, second, why)
    assert run["id"] not in world.calls()


def test_closed_while_implementing(local: tuple[Local, list[Any]]) -> None:
    """`pipeline issue close` while the agent works: the agent is stopped, nothing pushed."""
    world, holder = local
    number = world.add("Hold on, add a module")
    daemon = _start(world, holder)
    run = world.run_of(number, {"implementing"}, daemon)
    world.agent_started(run["id"])
    world.cli("issue", "close", str(number))
    _withdrawn(world, daemon, number, f"issue #{number} was closed while the agent was working")


def test_a_retry_without_the_label_still_runs(local: tuple[Local, list[Any]]) -> None:
    """A run a person retries after cancelling it needs no ready label (the daemon took it off
    when it claimed the issue): only closing the issue withdraws it, so it is pushed."""
    world, holder = local
    number = world.add("Hold on, add a module")
    daemon = _start(world, holder)
    first = world.run_of(number, {"implementing"}, daemon)
    world.cli("runs", "cancel", str(first["id"]))
    world.run_of(number, {"cancelled"}, daemon)
    (world.area / "release").write_text("go\n")
    issue = next(i for i in world.cli.json("issue", "list") if i["id"] == number)
    assert "ready-for-agent" not in issue["labels"]
    retried = world.cli.json("runs", "retry", str(first["id"]))
    run = world.run_of(number, {"succeeded", "failed", "escalated"}, daemon)
    assert run["id"] == retried["run"]["id"]
    assert run["state"] == "succeeded", world.events(run["id"])
    assert world.pushed_by(run["id"])
