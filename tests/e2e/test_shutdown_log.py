"""Stopping the daemon while an agent works: the log says what became of the run."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from pipeline.testing.gitrepos import make_remote

from .conftest import Cli, local_config, stop_daemon

AGENT = """
import pathlib, sys, time
marker, workdir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
if not marker.exists():  # the first attempt outlasts the grace period
    marker.write_text("working")
    time.sleep(600)
(workdir / "NOTES.md").write_text("done\\n")
"""

TEST = "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n"

# Not a speed limit: only how long to wait before calling the daemon hung.
HANG_GUARD_S = 120


def test_a_stop_after_the_grace_names_the_runs_it_left_and_says_it_stopped(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SIGTERM while an agent outlasts the grace period: the log names the run stopped
    (it is queued again once its lease expires) and ends with `stopped`; after a restart
    the recovery is told in words, not as a repr."""
    remote = make_remote(tmp_path, {"test_ok.py": TEST})
    agent, marker = tmp_path / "agent.py", tmp_path / "volume" / "homes" / "calc" / "working"
    agent.write_text(AGENT)
    config = local_config(tmp_path, remote, [sys.executable, str(agent), str(marker), "{workdir}"])
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Slow", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not marker.exists():
            assert daemon.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        os.killpg(daemon.pid, signal.SIGTERM)
        code = daemon.wait(timeout=HANG_GUARD_S)
    finally:
        stop_daemon(daemon)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "grace over: stopping run(s) 1; queued again once the lease expires" in text, text
    assert text.rstrip().endswith("stopped"), text[-2000:]
    daemon = cli.daemon(log)  # restarted: the run is recovered and ends
    try:
        runs = cli.wait_for(lambda rs: rs[0]["state"] == "succeeded", HANG_GUARD_S, daemon, log)
    finally:
        stop_daemon(daemon)
    assert runs[0]["attempt"] == 2
    assert "sweep: lease expired, to retry: run(s) 1" in log.read_text(), log.read_text()
