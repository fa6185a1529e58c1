"""Helpers for e2e tests: the ``pipeline`` command as a subprocess."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.configs import write_config
from pipeline.testing.ports import free_port


class Cli:
    """Runs ``python -m pipeline`` with one config file, as a user would."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.config = config
        self.env = env

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "pipeline", *args, "--config", str(self.config)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"pipeline {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)

    def daemon(self, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as handle:
            return subprocess.Popen(
                [sys.executable, "-m", "pipeline", "run", "--config", str(self.config)],
                env=self.env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_for(
        self,
        predicate: Callable[[list[dict[str, Any]]], bool],
        timeout_s: float,
        daemon: subprocess.Popen[bytes] | None = None,
        log: Path | None = None,
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            runs = self.json("runs", "list")
            if predicate(runs):
                return runs
            if daemon is not None and daemon.poll() is not None:
                break
            time.sleep(0.3)
        tail = log.read_text(errors="replace")[-4000:] if log else ""
        raise AssertionError(f"condition not met in {timeout_s}s; runs: {runs}\n{tail}")


ENDED = frozenset({"succeeded", "failed", "escalated", "cancelled"})
# A one-module project whose suite passes: the remote of most local-tracker loops.
CALC_PROJECT = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": (
        "import unittest\nfrom calc import add\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
}


def one_issue(
    cli: Cli, tmp_path: Path, guard_s: float, title: str = "Add mul"
) -> tuple[dict[str, Any], Any]:
    """Label one issue, run the daemon until its run ends (``guard_s``: when to call it
    hung, not a speed limit), stop it; the run as ``runs list`` and ``runs show`` give it."""
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", title, "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] in ENDED, guard_s, daemon, log)
        shown = cli.json("runs", "show", str(runs[0]["id"]))
    finally:
        stop_daemon(daemon)
    return runs[0], shown


def local_config(
    tmp_path: Path,
    remote: str,
    agent_argv: list[str],
    agent_env: dict[str, str] | None = None,
    database_url: str | None = None,
) -> Path:
    """A config for one repo ``calc`` on the local tracker, run by a scripted command agent
    (its history in SQLite under ``tmp_path`` unless ``database_url`` says otherwise)."""
    document: dict[str, Any] = {
        "database_url": database_url or f"sqlite:///{tmp_path / 'history.db'}",
        "volume": str(tmp_path / "volume"),
        "poll_interval_s": 0.5,
        "scheduler": {
            "lease_s": 10,
            "heartbeat_s": 1,
            "sweep_interval_s": 0.5,
            "claim_interval_s": 0.2,
        },
        "http": {"listen": f"127.0.0.1:{free_port()}"},
        "trackers": {"local": {"kind": "local"}},
        "agents": {
            "scripted": {"kind": "command", "command": agent_argv, "env": dict(agent_env or {})}
        },
        "repos": {
            "calc": {
                "tracker": "local",
                "slug": "demo/calc",
                "remote_url": remote,
                "test_command": f"{sys.executable} -m unittest -q",
                "agent": "scripted",
            }
        },
    }
    config = write_config(tmp_path / "pipeline.toml", document)
    (tmp_path / "volume").mkdir(exist_ok=True)
    return config


def two_issues_in_turn(cli: Cli, tmp_path: Path, guard_s: float) -> list[dict[str, Any]]:
    """Two issues of the repo ``calc``, the second labelled once the first run ended (each
    within ``guard_s``: when to call the daemon hung, not a speed limit); the runs."""
    cli("db", "upgrade")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        for count, title in enumerate(("First", "Second"), start=1):
            cli("issue", "add", "--repo", "calc", "--title", title, "--label", "ready-for-agent")
            runs = cli.wait_for(
                lambda rs, n=count: len(rs) == n and all(r["state"] in ENDED for r in rs),
                guard_s,
                daemon,
                log,
            )
    finally:
        stop_daemon(daemon)
    return runs


class FifoWatch(threading.Thread):
    """Notices a reader opening any FIFO at ``paths``, and lets it go on (writes ``answer``).

    A writer's non-blocking open fails while no one reads; once one does, it succeeds.
    A git that opened the FIFO waits for a writer until it is killed, so none is missed,
    and none hangs: a test counts the readers instead of waiting out git's time limit.
    """

    def __init__(self, *paths: Path, answer: bytes = b"") -> None:
        super().__init__(daemon=True)
        self.paths = paths
        self.answer = answer
        self.done = threading.Event()
        self.readers: list[Path] = []

    @property
    def path(self) -> Path:
        return self.paths[0]

    def __enter__(self) -> FifoWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join()

    def run(self) -> None:
        while not self.done.wait(0.05):
            for path in self.paths:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.ENXIO, errno.ENOTDIR, errno.EISDIR):
                        raise
                    continue
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode):  # not a file made there later
                        self.readers.append(path)
                        os.write(fd, self.answer)
                finally:
                    os.close(fd)


def stop_daemon(proc: subprocess.Popen[bytes], timeout_s: float = 20) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return proc.returncode


@pytest.fixture
def cli_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = dict(os.environ)
    env["HOME"] = str(tmp_path / "home")
    yield env


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def history_url(request: pytest.FixtureRequest) -> str | None:
    """The history's database for a ship world: None (SQLite under its root) or a PostgreSQL."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return None


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[object]:
    """Headless Chromium for one test (the dashboard's browser tests)."""
    from tests.e2e.test_dashboard_browser import chromium_driver

    with chromium_driver(tmp_path) as browser:
        yield browser
