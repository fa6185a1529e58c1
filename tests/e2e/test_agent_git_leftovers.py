"""What a git of the agent's leaves behind when it is killed mid-command: lock files.

An agent's ``git commit`` killed part way (its tool's time limit, the sandbox torn
down around a background git) leaves ``index.lock`` in the worktree's git directory,
and git then refuses to touch the index. Read from outside: the run's ending, the
remote.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, one_issue
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung

LOCK_LEAVER = """
import pathlib, sys
wd = pathlib.Path(sys.argv[2])
admin = pathlib.Path((wd / ".git").read_text().split(":", 1)[1].strip())
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\\n\\ndef mul(a, b):\\n    return a * b\\n")
(admin / "index.lock").write_text("")  # as a git killed mid-commit leaves it
print("changed calc.py; a git of mine was killed")
"""


def test_an_index_lock_the_agent_left_does_not_fail_the_run(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The agent's change ships though it left ``index.lock`` behind; the timeline says
    the lock was removed. Every git of the daemon in the tree failed on the lock, and the
    run failed for good on its first attempt."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(LOCK_LEAVER)
    config = local_config(
        tmp_path, remote, [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    )
    run, shown = one_issue(Cli(config, cli_env), tmp_path, HANG_GUARD_S)
    assert (run["state"], run["attempt"]) == ("succeeded", 1), run
    assert "def mul" in git(Path(remote), "show", "main:app/calc.py")
    messages = [event["message"] for event in shown["events"]]
    assert "removed index.lock, left behind by a git of the agent" in messages, messages
