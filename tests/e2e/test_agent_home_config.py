"""Git config the agent plants in its private HOME steers no git of the daemon.

The repo's HOME is the agent's to write, and it is kept between runs. Before each
agent call the daemon decides whether the agent's git needs a fallback identity; it
used to ask git with that HOME, so it read the agent's ``~/.gitconfig``. An agent
that includes a FIFO there has the daemon's git, unconfined, open the FIFO and
block on it (the next run stalls until git's time limit), or read whatever file
it names. Read from outside: the FIFO (did any reader open it?) and the remote.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, FifoWatch, local_config, two_issues_in_turn
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung

# Each run adds a module and lets the daemon commit it (no git of its own, no identity);
# the first also makes a FIFO in its HOME and includes it from its ~/.gitconfig.
AGENT = """
import os, pathlib, sys
wd = pathlib.Path(sys.argv[2])
home = pathlib.Path(os.environ["HOME"])
state = home / "ran-once"
name = "second" if state.exists() else "first"
state.write_text("1")
(wd / "app" / f"{name}.py").write_text("X = 1\\n")
if name == "first":
    fifo = home / "trap.fifo"
    os.mkfifo(fifo)
    (home / ".gitconfig").write_text(f"[include]\\n\\tpath = {fifo}\\n")
print("added a module")
"""


def test_a_fifo_in_the_agents_gitconfig_is_never_opened(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Both runs ship, and nothing of the daemon ever opened the FIFO the first agent
    included from its ``~/.gitconfig``. Before, the second run's identity check (the
    daemon's ``git config user.email`` with the agent's HOME) opened it and blocked
    there for git's time limit, ten minutes by default."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    # No identity on the host: the daemon decides one for the agent's git each run.
    env = {k: v for k, v in cli_env.items() if not k.startswith("GIT_") and k != "EMAIL"}
    cli = Cli(local_config(tmp_path, remote, argv), env)
    trap = tmp_path / "volume" / "homes" / "calc" / "trap.fifo"
    with FifoWatch(trap, answer=b"[user]\n\temail = planted@example.invalid\n") as watch:
        runs = two_issues_in_turn(cli, tmp_path, HANG_GUARD_S)
    assert watch.path.exists(), "the agent made no FIFO: the test shows nothing"
    assert not watch.readers, "the daemon's git opened the FIFO the agent planted"
    assert [r["state"] for r in runs] == ["succeeded", "succeeded"], runs
    for name in ("first", "second"):
        assert git(Path(remote), "show", f"main:app/{name}.py").strip() == "X = 1"
