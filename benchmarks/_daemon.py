"""A real ``pipeline run`` daemon against a fake GitHub, for the pickup and idle benchmarks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.testing.forges import FakeGitHub
from pipeline.testing.gitrepos import make_remote

TOKEN = "bench-gh-token"
SECRET = "bench-hook-secret"
READY = "ready-for-agent"
AGENT = 'import pathlib, sys\n(pathlib.Path(sys.argv[1]) / "NOTES.md").write_text("done\\n")\n'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DaemonSetup:
    """Where the daemon lives: its config, database, HTTP port and the repo slugs."""

    tmp: Path
    database_url: str
    port: int
    slugs: list[str]
    config: Path
    claim_interval_s: float = 1.0
    poll_interval_s: float = 3600.0
    with_remotes: bool = True

    def write(self, fake: FakeGitHub) -> None:
        agent = self.tmp / "agent.py"
        agent.write_text(AGENT)
        command = json.dumps([sys.executable, str(agent), "{workdir}"])
        lines = [
            f'database_url = "{self.database_url}"',
            f'volume = "{self.tmp / "volume"}"',
            f"poll_interval_s = {self.poll_interval_s}",
            "[scheduler]",
            f"claim_interval_s = {self.claim_interval_s}",
            "[http]",
            f'listen = "127.0.0.1:{self.port}"',
            "[trackers.gh]",
            'kind = "github"',
            f'base_url = "{fake.url}"',
            'token_env = "AFK_BENCH_GITHUB_TOKEN"',
            'webhook_secret_env = "AFK_BENCH_WEBHOOK_SECRET"',
            "[agents.scripted]",
            'kind = "command"',
            f"command = {command}",
        ]
        for n, slug in enumerate(self.slugs):
            remote = self._remote(n)
            lines += [f"[repos.r{n}]", 'tracker = "gh"', f'slug = "{slug}"']
            lines += [f'remote_url = "{remote}"', 'agent = "scripted"']
        (self.tmp / "volume").mkdir(exist_ok=True)
        self.config.write_text("\n".join(lines) + "\n")

    def _remote(self, n: int) -> str:
        if not self.with_remotes:  # one empty repository for all: never cloned, no issue filed
            shared = self.tmp / "unused.git"
            if not shared.exists():
                subprocess.run(["git", "init", "-q", "--bare", str(shared)], check=True)
            return f"file://{shared}"
        return make_remote(self.tmp, {"README.md": "app\n"}, name=f"remote{n}")


def env() -> dict[str, str]:
    environment = dict(os.environ)
    environment["AFK_BENCH_GITHUB_TOKEN"] = TOKEN
    environment["AFK_BENCH_WEBHOOK_SECRET"] = SECRET
    return environment


def start(setup: DaemonSetup, log: Path) -> subprocess.Popen[bytes]:
    """``pipeline db upgrade`` then ``pipeline run`` in its own session."""
    base = [sys.executable, "-m", "pipeline"]
    subprocess.run([*base, "db", "upgrade", "--config", str(setup.config)], env=env(), check=True)
    with log.open("wb") as handle:
        return subprocess.Popen(
            [*base, "run", "--config", str(setup.config)],
            env=env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def until(predicate: Callable[[], object], timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not seen in {timeout_s} s\n{log.read_text()[-3000:]}")
        time.sleep(0.005)
