"""An agent that commits, as the prompt asks, on a host whose git identity is in the
operator's own ~/.gitconfig (no GIT_* variables): its private HOME hides that file."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from pipeline.testing.configs import write_config
from pipeline.testing.gitrepos import git, make_remote

from .conftest import CALC_PROJECT, Cli, local_config, one_issue

AGENT = """
import pathlib, subprocess, sys
wd = pathlib.Path(sys.argv[1])
with open(wd / "calc.py", "a") as f:
    f.write("\\n\\ndef mul(a, b):\\n    return a * b\\n")
subprocess.run(["git", "add", "-A"], cwd=wd, check=True)
subprocess.run(["git", "commit", "-q", "-m", "Add mul"], cwd=wd, check=True)
print("committed")
"""


def test_an_agent_that_commits_needs_no_identity_of_its_own(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The agent's `git commit` works in its sandbox; its change is pushed in one go."""
    remote = make_remote(tmp_path, CALC_PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = local_config(tmp_path, remote, [sys.executable, str(agent), "{workdir}"])
    document = tomllib.loads(config.read_text())
    document["scheduler"]["max_attempts"] = 1  # a failing commit ends the run at once
    write_config(config, document)
    env = {k: v for k, v in cli_env.items() if not k.startswith("GIT_") and k != "EMAIL"}
    home = Path(env["HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text("[user]\n\tname = Operator\n\temail = op@example.invalid\n")
    run, shown = one_issue(Cli(config, env), tmp_path, guard_s=90)
    assert run["state"] == "succeeded", shown["run"]["error"]
    assert "def mul" in git(Path(remote), "show", "main:calc.py")
