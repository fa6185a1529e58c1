"""A persistent checkout the agent damaged is rebuilt, so the repo's later runs ship.

The agent's sandbox can write the persistent checkout's git directory (loose
objects, refs, ``packed-refs``): git in a worktree commits there. An agent that
appended junk to ``packed-refs`` or emptied the object files made every later git
command of the repo fail, run after run, until a human re-created the checkout.
The packs, which git in a worktree never writes, are read-only to it. Read from
outside: the runs' endings, the second run's timeline, the remote.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import ENDED, Cli, local_config, stop_daemon
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(240)
HANG_GUARD_S = 120  # not a speed limit: how long to wait before calling the daemon hung
# Enough files that the checkout's feed from the mirror keeps a pack (over git's
# unpack limit of 100 objects) rather than loose objects.
BIG_PROJECT = {**PROJECT, **{f"data/f{n}.txt": f"{n}\n" for n in range(150)}}

DAMAGE = {
    "packed_refs": """
with open(common / "packed-refs", "a") as f:
    f.write("this is not a ref line\\n")
""",
    "loose_objects": """
for loose in common.glob("objects/??/*"):
    loose.chmod(0o644)
    loose.write_bytes(b"")
""",
}
# What the first agent tries on the packs: all of it is refused.
PACK_DAMAGE = """
for pack in common.glob("objects/pack/*.pack"):
    try:
        pack.chmod(0o644)
        pack.write_bytes(pack.read_bytes()[:100])
        print("truncated a pack")
    except OSError as exc:
        print(f"could not truncate {pack.name}: {exc}")
    try:
        pack.unlink()
        print("deleted a pack")
    except OSError as exc:
        print(f"could not delete {pack.name}: {exc}")
(common / "objects").rename(common / "objects-aside")
"""

# Each run commits a module itself, in its sandbox; the first then damages the
# checkout's git directory.
AGENT = """
import os, pathlib, re, subprocess, sys
wd = pathlib.Path(sys.argv[2])
state = pathlib.Path(os.environ["HOME"]) / "runs"
count = len(state.read_text()) if state.exists() else 0
state.write_text("x" * (count + 1))
(wd / "app" / f"m{count}.py").write_text("X = 1\\n")
run = re.search(r"Afk-Run: (\\d+)", pathlib.Path(sys.argv[1]).read_text()).group(1)
subprocess.run(["git", "add", "-A"], cwd=wd, check=True)
message = f"The agent's own commit\\n\\nAfk-Run: {run}\\n"
subprocess.run(["git", "commit", "-q", "-m", message], cwd=wd, check=True)
if count == 0:
    common = pathlib.Path((wd / ".git").read_text().split(":", 1)[1].strip()).parent.parent
    try:
%s
        print("damaged the checkout")
    except OSError as exc:
        print(f"could not damage the checkout: {exc}")
"""


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_checkout_is_rebuilt_and_the_next_run_ships(
    damage: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The second issue's run ships its module, and its timeline says the checkout was
    rebuilt and why. Before, it failed in git, as did every later run of the repo."""
    runs, shown = _damaging_run_then_another(tmp_path, cli_env, PROJECT, DAMAGE[damage])
    assert runs[0]["state"] in ENDED, runs
    assert runs[1]["state"] == "succeeded", (runs, shown)
    remote = tmp_path / "remote.git"
    assert git(remote, "show", "main:app/m1.py").strip() == "X = 1"
    messages = [event["message"] for event in shown["events"]]
    assert any(m.startswith("rebuilt the repo's checkout") for m in messages), messages


def test_the_checkouts_packs_are_out_of_the_agents_reach(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """An agent cannot truncate or delete the checkout's packs, nor move the objects
    directory from under them: both runs ship, with no rebuild. Before, the truncated
    pack failed that run and every later one in git."""
    runs, shown = _damaging_run_then_another(tmp_path, cli_env, BIG_PROJECT, PACK_DAMAGE)
    assert [r["state"] for r in runs] == ["succeeded", "succeeded"], (runs, shown)
    remote = tmp_path / "remote.git"
    for name in ("m0", "m1"):
        assert git(remote, "show", f"main:app/{name}.py").strip() == "X = 1"
    subjects = git(remote, "log", "--format=%s", "main").splitlines()
    assert subjects.count("The agent's own commit") == 2, subjects
    messages = [event["message"] for event in shown["events"]]
    assert not any(m.startswith("rebuilt the repo's checkout") for m in messages), messages


def _damaging_run_then_another(
    tmp_path: Path, cli_env: dict[str, str], project: dict[str, str], damage: str
) -> tuple[list[dict[str, Any]], Any]:
    """Two issues in turn; the first agent runs ``damage`` on the checkout's git dir."""
    remote = make_remote(tmp_path, project)
    agent = tmp_path / "agent.py"
    body = "\n".join("        " + line for line in damage.strip().splitlines())
    agent.write_text(AGENT % body)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    return _two_issues_in_turn(Cli(local_config(tmp_path, remote, argv), cli_env), tmp_path)


def _two_issues_in_turn(cli: Cli, tmp_path: Path) -> tuple[list[dict[str, Any]], Any]:
    """Two issues, the second labelled once the first run ended; runs, the second shown."""
    cli("db", "upgrade")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        for count, title in enumerate(("First", "Second"), start=1):
            cli("issue", "add", "--repo", "calc", "--title", title, "--label", "ready-for-agent")
            runs = cli.wait_for(
                lambda rs, n=count: len(rs) >= n and all(r["state"] in ENDED for r in rs),
                HANG_GUARD_S,
                daemon,
                log,
            )
        second = max(runs, key=lambda r: r["id"])
        shown = cli.json("runs", "show", str(second["id"]))
    finally:
        stop_daemon(daemon)
    first = min(runs, key=lambda r: r["id"])
    return [first, second], shown
