"""An agent's symlink where a dependency dir is kept between runs must not steer the daemon.

``keep_dirs`` (``vendor/bundle`` by default) are moved aside by the daemon when it
throws a tree away (a ``clone`` workspace after every run, a broken worktree slot
before it is rebuilt) and moved back into the next run's tree. The agent plants
``vendor`` as a symlink to a directory outside its sandbox (another repository's
dependencies, here); the run's next attempt looks for what came back. Read from
outside: the victim directory, the remote.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.configs import merged, write_config
from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, one_issue
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(240)
HANG_GUARD_S = 120  # not a speed limit: how long to wait before calling the daemon hung
SECRET = "OTHER-REPO-GEM-SECRET-7d1c"

# The first attempt plants ``vendor`` as a symlink to the victim's parent directory,
# locks its worktree's registration (so the daemon rebuilds the slot rather than
# cleaning it) and crashes: the run is retried. The second attempt reports whatever
# ``vendor/bundle`` holds in its fresh tree, as a file the run commits and pushes.
AGENT = """
import os, pathlib, sys
wd = pathlib.Path(sys.argv[2])
state = pathlib.Path(os.environ["HOME"]) / "planted"
if not state.exists():
    state.write_text("1")
    (wd / "vendor").symlink_to(os.environ["VICTIM_PARENT"])
    dotgit = wd / ".git"
    if dotgit.is_file():
        admin = pathlib.Path(dotgit.read_text().split(":", 1)[1].strip())
        (admin / "locked").write_text("")
    sys.exit(3)
found = wd / "vendor" / "bundle" / "gem.rb"
(wd / "seen.txt").write_text(found.read_text() if found.exists() else "nothing")
print("reported what vendor/bundle holds")
"""


def _config(tmp_path: Path, remote: str, victim_parent: Path, workspace: str) -> Path:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    path = local_config(tmp_path, remote, argv, {"VICTIM_PARENT": str(victim_parent)})
    document: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    changes = {
        "repos": {"calc": {"workspace": workspace}},
        "scheduler": {"backoff_base_s": 0.2, "backoff_max_s": 0.5},
    }
    return write_config(path, merged(document, changes))


@pytest.mark.parametrize("workspace", ["worktree", "clone"])
def test_a_symlinked_keep_dir_parent_moves_nothing_from_outside_the_tree(
    tmp_path: Path, cli_env: dict[str, str], workspace: str
) -> None:
    """A ``vendor`` symlink the agent planted does not make the daemon move a directory
    from outside the tree into the next run's tree: the victim stays where it was, and
    the next agent sees nothing of it (before, the daemon moved the other repository's
    ``bundle`` into the retry's tree, and the run pushed what it held)."""
    remote = make_remote(tmp_path, PROJECT)
    victim_parent = tmp_path / "volume" / "repos" / "local" / "demo" / "other" / "vendor"
    (victim_parent / "bundle").mkdir(parents=True)
    (victim_parent / "bundle" / "gem.rb").write_text(SECRET)
    cli = Cli(_config(tmp_path, remote, victim_parent, workspace), cli_env)
    run, _ = one_issue(cli, tmp_path, HANG_GUARD_S)
    assert (run["state"], run["attempt"]) == ("succeeded", 2), run
    assert (victim_parent / "bundle" / "gem.rb").read_text() == SECRET
    assert git(Path(remote), "show", "main:seen.txt") == "nothing"
