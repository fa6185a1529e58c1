"""An agent whose change adds more new files than one command line can name.

The daemon stages the files an agent made and did not commit itself. Forty thousand
new files with longish paths are more than ``execve`` takes in one argument list
(about 2 MiB on Linux): staging them with every path on git's command line failed
with ``Argument list too long``, an internal error on every attempt, the run failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, one_issue
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(300)
HANG_GUARD_S = 200  # not a speed limit: how long to wait before calling the daemon hung
FILES = 40_000

GENERATOR = f"""
import pathlib, sys
wd = pathlib.Path(sys.argv[2])
for i in range({FILES}):
    folder = wd / "generated" / "fixtures" / "by-number" / f"group-{{i % 40:02d}}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"fixture-with-a-descriptive-name-{{i:05d}}.txt").write_text(f"{{i}}\\n")
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\\n\\ndef mul(a, b):\\n    return a * b\\n")
print("generated")
"""


def test_forty_thousand_new_files_are_staged_and_shipped(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Forty thousand new files (about 3.5 MiB of paths): the run commits and pushes them
    all with its change, on its first attempt."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(GENERATOR)
    config = local_config(
        tmp_path, remote, [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    )
    run, _ = one_issue(Cli(config, cli_env), tmp_path, HANG_GUARD_S)
    assert (run["state"], run["attempt"]) == ("succeeded", 1), run
    names = git(Path(remote), "ls-tree", "-r", "--name-only", "main", "--", "generated")
    assert len(names.splitlines()) == FILES
    assert "def mul" in git(Path(remote), "show", "main:app/calc.py")
