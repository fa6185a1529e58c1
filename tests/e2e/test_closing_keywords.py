"""A commit the daemon pushes closes no issue: ``pipeline run``, a command agent, a bare remote.

Pushed to the default branch, "Fixes #7" in a commit message makes GitHub, Gitea and
GitLab close issue 7. The agent writes the message (as the prompt asks, it "references
the issue"), and the issue's title becomes the subject when the daemon commits for it;
both are text a stranger can steer. Read from the remote: the pushed message still names
every issue it named, with no closing keyword before any of them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, one_issue
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung
CLOSING = re.compile(r"\b(clos|fix|resolv|implement|reopen)\w*\b:?\s+(issues?\s+)?\S*#\d", re.I)

CLOSER = """
import pathlib, re, subprocess, sys
prompt, wd = pathlib.Path(sys.argv[1]).read_text(), pathlib.Path(sys.argv[2])
trailers = re.findall(r"^(?:Afk-Run|Refs): .+$", prompt, re.M)
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\\n\\ndef mul(a, b):\\n    return a * b\\n")
message = "Add mul\\n\\nCloses #1, fixes #7 and resolves acme/other#3\\n\\n"
if MODE != "uncommitted":
    subprocess.run(["git", "add", "-A"], cwd=wd, check=True)
    ending = "\\n".join(trailers) if MODE == "with trailers" else ""
    subprocess.run(["git", "commit", "-q", "-m", message + ending], cwd=wd, check=True)
"""
# How the agent leaves its work, and the references the pushed message must keep.
MODES = {
    "with trailers": ("#1", "#7", "acme/other#3"),  # pushed as it was, before
    "without trailers": ("#1", "#7", "acme/other#3"),  # the daemon's commit, its message
    "uncommitted": ("#2",),  # the daemon commits with the issue's title as the subject
}


@pytest.mark.parametrize("mode", MODES)
def test_no_pushed_message_closes_an_issue(
    tmp_path: Path, cli_env: dict[str, str], mode: str
) -> None:
    """Issue #1, titled "Fix #2: add mul"; the agent's message closes #1, #7 and
    acme/other#3: the pushed commit still references them and closes none."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(f"MODE = {mode!r}\n{CLOSER}")
    config = local_config(
        tmp_path, remote, [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    )
    run, _ = one_issue(Cli(config, cli_env), tmp_path, HANG_GUARD_S, "Fix #2: add mul")
    assert run["state"] == "succeeded", run
    message = git(Path(remote), "log", "-1", "--format=%B", "main")
    assert "def mul" in git(Path(remote), "show", "main:app/calc.py")
    assert CLOSING.findall(message) == [], message
    assert all(f"Refs {ref}" in message for ref in MODES[mode]), message
    assert f"Afk-Run: {run['id']}" in message
