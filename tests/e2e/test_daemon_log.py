"""What the daemon's log tells a user watching it: runs starting, retrying, stopped by a
shutdown and recovered after it, in words."""

from __future__ import annotations

import os
import signal
import sys
import time
import tomllib
from pathlib import Path

from pipeline.testing.configs import write_config
from pipeline.testing.gitrepos import make_remote

from .conftest import Cli, local_config, one_issue, stop_daemon

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


FLAKY_AGENT = """
import pathlib, sys
marker, workdir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
if not marker.exists():
    marker.write_text("failed once")
    sys.exit("first attempt fails")
(workdir / "NOTES.md").write_text("done\\n")
"""


def test_a_run_starting_and_retrying_is_told_in_the_log(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Each attempt's start is a line, and a failed attempt that will be retried says so
    with its error, not only once the attempts are used up."""
    remote = make_remote(tmp_path, {"test_ok.py": TEST})
    agent, marker = tmp_path / "agent.py", tmp_path / "volume" / "homes" / "calc" / "failed"
    agent.write_text(FLAKY_AGENT)
    config = local_config(tmp_path, remote, [sys.executable, str(agent), str(marker), "{workdir}"])
    document = tomllib.loads(config.read_text())
    document["scheduler"]["backoff_base_s"] = 0.5
    write_config(config, document)
    run, _ = one_issue(Cli(config, cli_env), tmp_path, guard_s=HANG_GUARD_S)
    text = (tmp_path / "daemon.log").read_text()
    assert run["state"] == "succeeded", text[-3000:]
    assert "run 1 started (attempt 1)" in text, text
    assert "run 1: attempt 1 failed (agent_error), retry in " in text, text
    assert "first attempt fails" in text.split("retry in ", 1)[1].splitlines()[0], text
    assert "run 1 started (attempt 2)" in text, text


def test_a_repo_frozen_by_hand_is_told_without_a_run(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`pipeline repos freeze` names no run: the log says who and why, not `(run None)`."""
    remote = make_remote(tmp_path, {"test_ok.py": TEST})
    config = local_config(tmp_path, remote, [sys.executable, "-c", "pass"])
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("repos", "freeze", "calc", "--note", "a manual brake")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while "repo calc frozen by" not in log.read_text():
            assert daemon.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        stop_daemon(daemon)
    line = next(x for x in log.read_text().splitlines() if "repo calc frozen by" in x)
    assert "(run None)" not in line, line
    assert ": a manual brake; resume with: pipeline repos unfreeze calc" in line
