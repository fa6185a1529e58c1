"""An agent orphaned by a killed daemon never edits the next run's tree."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from pipeline.config.settings import RepoSettings, WorkspaceSettings
from pipeline.core.proc import processes_under
from pipeline.testing.gitrepos import make_remote
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import Workspaces


def test_prepare_kills_processes_left_in_the_repos_worktrees(tmp_path: Path) -> None:
    """A process still working in a repo's worktree from a dead run is killed before reuse."""
    remote = make_remote(tmp_path, {"README.md": "hello\n"})
    volume = tmp_path / "volume"
    volume.mkdir()
    spaces = Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0))
    repo = RepoSettings(name="web", tracker="local", slug="acme/web", remote_url=remote)
    first = spaces.prepare(repo, run_id=1, issue_ref="#1", base_env={}, events=RecordingSink())
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        cwd=first.workdir,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while orphan.pid not in processes_under(first.path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphan.pid in processes_under(first.path)
        spaces.prepare(repo, run_id=2, issue_ref="#2", base_env={}, events=RecordingSink())
        assert orphan.wait(timeout=10) != 0
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_processes_elsewhere_are_left_alone(tmp_path: Path) -> None:
    """Only processes working inside the tree are stragglers."""
    elsewhere = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        (tmp_path / "tree").mkdir()
        assert elsewhere.pid not in processes_under(tmp_path / "tree")
    finally:
        elsewhere.kill()
        elsewhere.wait()
