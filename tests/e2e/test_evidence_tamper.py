"""An escalating run's tree is kept as evidence whatever its agent left in git's files.

The agent can write its worktree's admin directory and the checkout's
``worktrees/`` beside it. Files there that ``git worktree move`` and ``rename``
trip over (``locked``, ``modules``, a directory already holding the name the kept
tree's admin directory gets) must not cost the human the evidence, nor turn the
agent's question into a failure. Read from outside: the run's ending, the volume,
the next run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import ENDED, Cli, local_config, stop_daemon
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung

# The first run changes calc.py, trips ``git worktree move`` and squats the kept
# tree's admin name (its run id is in its branch name), then asks a question.
# The second run ships a change: the slot still works.
AGENT = """
import pathlib, re, subprocess, sys
wd = pathlib.Path(sys.argv[2])
if (wd / "first-done").exists() or pathlib.Path(sys.argv[1]).read_text().count("Second"):
    (wd / "app" / "second.py").write_text("X = 2\\n")
    print("second change")
    sys.exit(0)
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\\n\\ndef evidence():\\n    return 1\\n")
admin = pathlib.Path((wd / ".git").read_text().split(":", 1)[1].strip())
(admin / "locked").write_text("mine")
(admin / "modules").mkdir()
branch = subprocess.run(
    ["git", "symbolic-ref", "--short", "HEAD"], cwd=wd, capture_output=True, text=True
).stdout
run_id = re.search(r"-(\\d+)$", branch.strip()).group(1)
squat = admin.parent / f"frozen-{run_id}"
squat.mkdir()
(squat / "planted").write_text("x")
print("BLOCKED: which port should the service use?")
"""


def test_a_tampered_admin_dir_does_not_cost_the_evidence(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The blocked run escalates with its tree kept (its change in it, the kept tree
    locked), and the next run of the repo ships. Before, ``git worktree move``
    refused the locked tree: no evidence, and the run ended ``failed``."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    cli = Cli(local_config(tmp_path, remote, argv), cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "First", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] in ENDED, HANG_GUARD_S)
        cli("issue", "add", "--repo", "calc", "--title", "Second", "--label", "ready-for-agent")
        runs = cli.wait_for(
            lambda rs: len(rs) == 2 and all(r["state"] in ENDED for r in rs), HANG_GUARD_S
        )
    finally:
        stop_daemon(daemon)
    first, second = sorted(runs, key=lambda r: r["id"])
    assert (first["state"], first["error_class"]) == ("escalated", "blocked"), first
    evidence = tmp_path / "volume" / "frozen" / str(first["id"])
    manifest = json.loads((evidence / "manifest.json").read_text())
    assert manifest["branch"] == first["branch"]
    assert "def evidence" in (evidence / "worktree" / "app" / "calc.py").read_text()
    checkout = tmp_path / "volume" / "repos" / "local" / "demo" / "calc" / "checkout"
    listing = git(checkout, "worktree", "list", "--porcelain")
    assert f"worktree {evidence / 'worktree'}\n" in listing, listing
    kept_entry = listing.split(f"worktree {evidence / 'worktree'}\n", 1)[1].split("\n\n")[0]
    assert "locked" in kept_entry, listing
    assert second["state"] == "succeeded", second
    assert git(Path(remote), "show", "main:app/second.py").strip() == "X = 2"
