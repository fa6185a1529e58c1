"""Symlinks the agent leaves in git's own files do not carry the daemon's git outside.

The agent's sandbox can write the persistent checkout's git directory (objects,
refs, logs) and its worktree's admin directory. Git writes some files there by
opening them, following a symlink: ``FETCH_HEAD`` (every feed of the checkout from
the daemon's mirror) and the reflogs (every commit). An agent that points them at
files outside its sandbox would have the daemon, unconfined, overwrite or append
to those. Read from outside: the files, the remote.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, two_issues_in_turn
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung
PRECIOUS = "operator data the agent cannot see\n"

# Each run adds a module; the first also points FETCH_HEAD, its worktree's HEAD
# reflog and the run branch's reflog at files outside its sandbox.
AGENT = """
import os, pathlib, subprocess, sys
wd = pathlib.Path(sys.argv[2])
state = pathlib.Path(os.environ["HOME"]) / "ran-once"
name = "second" if state.exists() else "first"
state.write_text("1")
(wd / "app" / f"{name}.py").write_text("X = 1\\n")
if name == "first":
    admin = pathlib.Path((wd / ".git").read_text().split(":", 1)[1].strip())
    common = admin.parent.parent
    branch = subprocess.run(
        ["git", "symbolic-ref", "HEAD"], cwd=wd, capture_output=True, text=True
    ).stdout.strip()
    plants = {
        common / "FETCH_HEAD": os.environ["VICTIM_FETCH"],
        admin / "logs" / "HEAD": os.environ["VICTIM_REFLOG"],
        common / "logs" / branch: os.environ["VICTIM_BRANCH_LOG"],
    }
    for link, target in plants.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(target)
print("added a module")
"""


def test_links_in_the_git_dir_do_not_steer_the_daemons_git(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Both runs ship, and the files the first agent's links named are untouched.
    Before, the daemon's commit appended its reflog lines to them and the next run's
    feed overwrote the ``FETCH_HEAD`` target with the mirror's branch list."""
    remote = make_remote(tmp_path, PROJECT)
    victims = {
        name: tmp_path / "operator" / f"{name}.txt"
        for name in ("VICTIM_FETCH", "VICTIM_REFLOG", "VICTIM_BRANCH_LOG")
    }
    for victim in victims.values():
        victim.parent.mkdir(exist_ok=True)
        victim.write_text(PRECIOUS)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    env = {name: str(path) for name, path in victims.items()}
    cli = Cli(local_config(tmp_path, remote, argv, env), cli_env)
    runs = two_issues_in_turn(cli, tmp_path, HANG_GUARD_S)
    assert [r["state"] for r in runs] == ["succeeded", "succeeded"], runs
    for victim in victims.values():
        assert victim.read_text() == PRECIOUS, victim
    for name in ("first", "second"):
        assert git(Path(remote), "show", f"main:app/{name}.py").strip() == "X = 1"


# The first run replaces the checkout's ``worktrees/`` (which holds its admin dir)
# by a link to another repository's worktrees; the second run only adds a module.
SWAPPER = """
import os, pathlib, sys
wd = pathlib.Path(sys.argv[2])
state = pathlib.Path(os.environ["HOME"]) / "ran-once"
name = "second" if state.exists() else "first"
state.write_text("1")
(wd / "app" / f"{name}.py").write_text("X = 1\\n")
if name == "first":
    admin = pathlib.Path((wd / ".git").read_text().split(":", 1)[1].strip())
    worktrees = admin.parent
    worktrees.rename(worktrees.with_name("moved-aside"))
    worktrees.symlink_to(os.environ["VICTIM_WORKTREES"])
print("added a module")
"""


def test_a_linked_worktrees_dir_leaves_another_repos_slot_alone(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Another repository's slot, which the link named, keeps its files and gets none
    of the daemon's, and the repo's next run ships. Before, the daemon wrote its admin
    files into that slot and, rebuilding its own, deleted it."""
    remote = make_remote(tmp_path, PROJECT)
    other = tmp_path / "volume" / "repos" / "local" / "demo" / "other" / "worktrees"
    (other / "slot-0" / "app").mkdir(parents=True)
    (other / "slot-0" / "app" / "work.py").write_text(PRECIOUS)
    agent = tmp_path / "agent.py"
    agent.write_text(SWAPPER)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    cli = Cli(local_config(tmp_path, remote, argv, {"VICTIM_WORKTREES": str(other)}), cli_env)
    runs = two_issues_in_turn(cli, tmp_path, HANG_GUARD_S)
    assert sorted(p.name for p in (other / "slot-0").iterdir()) == ["app"]
    assert (other / "slot-0" / "app" / "work.py").read_text() == PRECIOUS
    assert runs[0]["state"] == "succeeded", runs
    assert git(Path(remote), "show", "main:app/second.py").strip() == "X = 1"


# The first run writes garbage over the persistent checkout's HEAD (its worktree's
# HEAD is a file of its own; that one is the checkout's); the later runs add modules.
HEAD_BREAKER = """
import os, pathlib, sys
wd = pathlib.Path(sys.argv[2])
state = pathlib.Path(os.environ["HOME"]) / "runs"
count = len(state.read_text()) if state.exists() else 0
state.write_text("x" * (count + 1))
(wd / "app" / f"m{count}.py").write_text("X = 1\\n")
if count == 0:
    admin = pathlib.Path((wd / ".git").read_text().split(":", 1)[1].strip())
    try:
        (admin.parent.parent / "HEAD").write_text("garbage\\n")
        print("overwrote the checkout's HEAD")
    except OSError as exc:
        print(f"could not overwrite the checkout's HEAD: {exc}")
"""


def test_the_checkouts_head_is_out_of_the_agents_reach(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """An agent cannot overwrite the persistent checkout's HEAD, so its run and the
    repo's later runs ship. Before, git called the checkout "not a git repository":
    that run failed at publish and every later run of the repo at its preparation."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(HEAD_BREAKER)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    cli = Cli(local_config(tmp_path, remote, argv), cli_env)
    runs = two_issues_in_turn(cli, tmp_path, HANG_GUARD_S)
    assert [r["state"] for r in runs] == ["succeeded", "succeeded"], runs
    for name in ("m0", "m1"):
        assert git(Path(remote), "show", f"main:app/{name}.py").strip() == "X = 1"
