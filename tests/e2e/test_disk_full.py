"""A run that fills the volume, under ``pipeline run``: the repo recovers without a human.

The volume is a 20 MB tmpfs. On its first attempt the agent fills it (a junk file
in its tree, written until ``ENOSPC``) and makes its real change; committing then
fails for want of space. The daemon must remove what the failed attempt left and
retry, and the retry must succeed and push only the real change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import CALC_PROJECT, Cli, local_config, stop_daemon

pytestmark = pytest.mark.slow

SIZE = "20m"
ENDED = ("succeeded", "failed", "escalated", "cancelled")
AGENT = """
import pathlib, sys
workdir = pathlib.Path(sys.argv[1])
marker = pathlib.Path.home() / "filled-once"
(workdir / "note.txt").write_text("the real change\\n")
if not marker.exists():
    marker.write_text("1")
    chunk = b"\\xa5" * (1024 * 1024)
    try:
        with open(workdir / "junk.bin", "wb") as handle:
            while True:
                handle.write(chunk)
                handle.flush()
    except OSError as exc:
        print(f"filled the disk: {exc}")
print("done")
"""


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A 20 MB tmpfs mounted as the volume; unmounted afterwards."""
    volume = tmp_path / "volume"
    volume.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(volume)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def test_a_run_that_fills_the_volume_is_retried_and_succeeds(
    tmp_path: Path, small_volume: Path, cli_env: dict[str, str]
) -> None:
    """The attempt that filled the disk fails as disk_full; its leftovers go; the retry pushes."""
    remote = make_remote(tmp_path, CALC_PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = local_config(tmp_path, remote, [sys.executable, str(agent), "{workdir}"])
    config.write_text(
        config.read_text().replace("[scheduler]\n", "[scheduler]\nbackoff_base_s = 0.5\n")
    )
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add a note", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] in ENDED, 120, daemon, log)
    finally:
        stop_daemon(daemon)
    run = runs[0]
    timeline = cli("runs", "show", str(run["id"])).stdout
    assert run["state"] == "succeeded", timeline + log.read_text()[-3000:]
    assert "filled the disk" in timeline and "retry in" in timeline, timeline
    assert "disk full: git " in timeline and "No space left" in timeline, timeline
    assert git(Path(remote), "show", "main:note.txt").strip() == "the real change"
    assert "junk.bin" not in git(Path(remote), "ls-tree", "--name-only", "main")
    assert list(small_volume.rglob("junk.bin")) == []
    assert shutil.disk_usage(small_volume).free > 10 * 1024 * 1024
