"""The whole loop on embedded defaults: `pipeline issue add` to a pushed, closed issue."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.testing.gitrepos import commit_to_remote, git, make_remote, remote_sha

from .conftest import Cli, local_config, stop_daemon

PROJECT = {
    "app/__init__.py": "",
    "app/calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": (
        "import unittest\nfrom app.calc import add\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
}

AGENT = """
import os, pathlib, sys
prompt = pathlib.Path(sys.argv[1]).read_text()
wd = pathlib.Path(sys.argv[2])
pathlib.Path(os.environ["AGENT_ENV_DUMP"]).write_text("\\n".join(sorted(os.environ)))
(wd / "test_mul.py").write_text(
    "import unittest\\nfrom app.calc import mul\\n\\n\\nclass T(unittest.TestCase):\\n"
    "    def test_mul(self):\\n        self.assertEqual(mul(2, 3), 6)\\n")
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\\n\\ndef mul(a, b):\\n    return a * b\\n")
print("wrote a test and the change")
"""


# Not a speed limit: only how long to wait before calling the daemon hung.
HANG_GUARD_S = 60
ACTIVE = {"queued", "retry_wait", "preparing", "implementing", "testing", "publishing", "watching"}


def _world(tmp_path: Path) -> tuple[Path, str]:
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    env = {"AGENT_ENV_DUMP": str(tmp_path / "volume" / "homes" / "calc" / "agent-env.txt")}
    return local_config(tmp_path, remote, argv, env), remote


def test_local_issue_runs_end_to_end(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A labelled local issue is implemented, tested, pushed with trailers and closed once."""
    config, remote = _world(tmp_path)
    cli_env["GITHUB_TOKEN"] = "sentinel-forge-token"
    cli_env["PIPELINE_WEBHOOK_SECRET"] = "sentinel-webhook-secret"
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    added = cli(
        "issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent"
    )
    assert "issue 1 added to calc" in added.stdout
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "succeeded", 60, daemon, log)
    finally:
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    run = runs[0]
    head = git(Path(remote), "log", "-1", "--format=%H%n%B", "main")
    assert head.startswith(run["pushed_sha"])
    assert f"Afk-Run: {run['id']}" in head and "Refs: local://calc/issues/1" in head
    issues = cli.json("issue", "list", "--all")
    assert issues[0]["state"] == "closed"
    shown = cli("runs", "show", str(run["id"])).stdout
    assert "pushed" in shown and "tests passed" in shown
    seen = (tmp_path / "volume" / "homes" / "calc" / "agent-env.txt").read_text().split()
    assert "GITHUB_TOKEN" not in seen and "PIPELINE_WEBHOOK_SECRET" not in seen
    assert "AGENT_ENV_DUMP" in seen


def test_labelling_twice_enqueues_once(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Two ready issues and a relabel: one run per issue, never two for one issue."""
    config, _ = _world(tmp_path)
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
    cli("issue", "label", "1", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "succeeded", 60, daemon, log)
    finally:
        stop_daemon(daemon)
    assert len(cli.json("runs", "list")) == 1


def test_issue_add_refuses_a_repo_that_is_not_local(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`pipeline issue add` names the problem when the repo is unknown."""
    config, _ = _world(tmp_path)
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    proc = cli("issue", "add", "--repo", "nope", "--title", "x", check=False)
    assert proc.returncode == 2
    assert "--repo nope: not an enrolled repo (enrolled: calc)" in proc.stderr
    assert "Traceback" not in proc.stderr


def _tgkill(pid: int, tid: int, signum: int) -> None:
    """Send ``signum`` to thread ``tid`` of process ``pid`` (not to the process as a whole)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill {pid} {tid}")


def test_a_sigterm_taken_by_any_thread_stops_the_daemon(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The kernel may hand a process's SIGTERM to any of its threads. One taken by a worker
    thread did not wake the main thread's wait, so the daemon ran on until killed."""
    config, _ = _world(tmp_path)
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        while "started: SIGTERM" not in log.read_text():  # its main thread now only waits
            assert daemon.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        tasks = Path(f"/proc/{daemon.pid}/task")
        others = sorted(int(t.name) for t in tasks.iterdir() if int(t.name) != daemon.pid)
        assert others, "the daemon runs no thread besides its main one"
        _tgkill(daemon.pid, others[-1], signal.SIGTERM)
        code = daemon.wait(timeout=HANG_GUARD_S)
    finally:
        stop_daemon(daemon)
    assert code == 0, log.read_text()[-3000:]
    assert "received SIGTERM" in log.read_text()


def test_a_trailer_from_before_the_run_is_not_its_push(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A remote whose history already names run 1 (pushed by a daemon whose history database
    was since replaced) does not pass for run 1's push: run 1 implements and pushes its issue."""
    config, remote = _world(tmp_path)
    earlier = commit_to_remote(
        remote, {"NOTES.md": "an earlier run\n"}, "Earlier change\n\nAfk-Run: 1"
    )
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(
            lambda rs: bool(rs) and rs[0]["state"] not in ACTIVE, HANG_GUARD_S, daemon, log
        )
    finally:
        stop_daemon(daemon)
    assert runs[0]["state"] == "succeeded", log.read_text()[-3000:]
    assert runs[0]["pushed_sha"] != earlier
    assert remote_sha(remote) == runs[0]["pushed_sha"]
    assert "def mul" in git(Path(remote), "show", "main:app/calc.py")


def test_issue_add_without_a_config_says_which_file_it_lacks(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Run as the README's local tracker section shows it, with no --config and no
    PIPELINE_CONFIG, `pipeline issue add` says no config was read and how to give one."""
    env = {k: v for k, v in cli_env.items() if k != "PIPELINE_CONFIG"}
    env["PIPELINE_DATA_DIR"] = str(tmp_path / "data")
    argv = [sys.executable, "-m", "pipeline", "issue", "add", "--repo", "calc", "--title", "x"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--repo calc: not an enrolled repo (enrolled: none)" in proc.stderr
    assert "no config file was read: pass --config FILE or set PIPELINE_CONFIG" in proc.stderr
