"""A campaign world: bare git remotes, a command agent, a TOML config, daemon subprocesses.

Each world is the real thing at small scale: ``python -m pipeline run`` as a
subprocess against a fresh SQLite or PostgreSQL database, the local tracker
(issues live in that database, so every replica sees them) and real bare
remotes. The agent is a small Python script whose behaviour is steered per
world by environment variables (``AGENT_MODE``, ``AGENT_SLEEP_MIN_S``...).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.store import Store
from pipeline.testing import databases
from pipeline.testing.configs import merged, write_config
from pipeline.testing.databases import postgres_problem
from pipeline.testing.gitrepos import make_remote
from pipeline.testing.ports import free_port

from .oracle import IssueView, commits_by_run

PROJECT = {
    "README.md": "a project the campaign's agent edits\n",
    "test_ok.py": "import unittest\n\n\nclass T(unittest.TestCase):\n"
    "    def test_ok(self):\n        self.assertTrue(True)\n",
}
READY = "ready-for-agent"

# The agent: writes one new file per invocation (so every run has a change and
# no two runs conflict), sleeps a random time, and misbehaves on request.
AGENT = r"""
import os, pathlib, random, sys, time
prompt = pathlib.Path(sys.argv[1]).read_text()
wd = pathlib.Path(sys.argv[2])
dump = os.environ.get("AGENT_ENV_DUMP")
if dump:
    with open(dump, "a") as f:
        f.write(repr(sorted(os.environ.items())) + "\n")
mode = os.environ.get("AGENT_MODE", "ok")
if os.environ.get("AGENT_PRINT_KEY"):  # a careless agent echoes its own API key
    print("debug: key=" + os.environ.get("ANTHROPIC_API_KEY", "?"), flush=True)
    print("debug: key=" + os.environ.get("ANTHROPIC_API_KEY", "?"), file=sys.stderr)
lo = float(os.environ.get("AGENT_SLEEP_MIN_S", "0"))
hi = float(os.environ.get("AGENT_SLEEP_MAX_S", "0"))
if hi > 0:
    time.sleep(random.uniform(lo, hi))
if mode == "crash":
    import signal
    print("agent: about to crash", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "fail":
    print("agent: giving up", file=sys.stderr)
    sys.exit(3)
if mode == "hang":
    print("thinking...", flush=True)
    time.sleep(3600)
if mode == "garbage":
    sys.stdout.buffer.write(bytes(range(256)) * 64 + b"\n{not json\n\x00\xff\n")
    sys.stdout.flush()
if mode == "huge":
    line = "x" * 1000 + "\n"
    for _ in range(20000):
        sys.stdout.write(line)
    sys.stdout.flush()
if mode == "overloaded":
    print('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    print("API Error: 529 Overloaded", file=sys.stderr)
    sys.exit(1)
if mode == "shell_probe":
    pathlib.Path(os.environ["AGENT_PROMPT_COPY"]).write_text(prompt)
name = "change-%d-%d.txt" % (os.getpid(), time.time_ns())
(wd / name).write_text(prompt[:200])
print("wrote", name)
"""


def postgres_available() -> str | None:
    """None when the test PostgreSQL server answers, else why not."""
    return postgres_problem()


def fresh_database(engine: str, root: Path) -> AbstractContextManager[str]:
    """A new empty database on ``engine`` (sqlite|postgresql), dropped afterwards."""
    return databases.fresh_database(engine, root, "afk_rel")


@dataclass
class WorldSpec:
    """What a world holds; the defaults suit a quick kill -9 trial."""

    repos: int = 1
    max_concurrency: int = 4
    lease_s: float = 3.0
    heartbeat_s: float = 1.0
    sweep_interval_s: float = 0.5
    claim_interval_s: float = 0.2
    max_attempts: int = 3
    max_recoveries: int = 3
    backoff_base_s: float = 0.2
    backoff_max_s: float = 1.0
    idle_timeout_s: float = 600.0
    run_timeout_s: float = 300.0
    agent_env: Mapping[str, str] = field(default_factory=dict)
    # Laid over the generated config, tables merged key by key (pipeline.testing.configs).
    config: Mapping[str, Any] = field(default_factory=dict)
    agent_name: str = "scripted"
    tracker: str = "local"  # the repos' tracker; any other is added through ``config``
    remote_urls: Mapping[str, str] = field(default_factory=dict)
    test_command: str = f"{sys.executable} -m unittest -q"


def agent_area(root: Path) -> Path:
    """``root/agent-area``, made if missing: writable by the world's sandboxed agents."""
    area = root / "agent-area"
    area.mkdir(parents=True, exist_ok=True)
    return area


class World:
    """One campaign world on disk, with helpers to run daemons and read the outcome."""

    def __init__(self, root: Path, database_url: str, spec: WorldSpec | None = None) -> None:
        self.root = root
        self.database_url = database_url
        self.spec = spec or WorldSpec()
        self.remotes: dict[str, str] = {}
        self.logs: list[Path] = []
        self.env = self._base_env()
        self.port = free_port()
        self._ports: dict[str, int] = {}
        (root / "volume").mkdir(parents=True, exist_ok=True)
        for index in range(self.spec.repos):
            name = f"r{index}"
            self.remotes[name] = make_remote(root, PROJECT, name=name)
        self.agent = root / "agent.py"
        self.agent.write_text(AGENT)
        # Where scripted agents leave what the campaign reads (env dumps, call counts):
        # the one host directory their sandbox may write besides their own tree and HOME.
        self.agent_area = agent_area(root)
        self.config = root / "pipeline.toml"
        write_config(self.config, self._config())
        self._store: Store | None = None

    # -- building ------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PIPELINE_", "ANTHROPIC_", "GIT_"))
        }
        env.update(
            {
                "HOME": str(self.root / "home"),
                "PIPELINE_DATA_DIR": str(self.root / "data"),
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_AUTHOR_NAME": "afk test",
                "GIT_AUTHOR_EMAIL": "afk@test.invalid",
                "GIT_COMMITTER_NAME": "afk test",
                "GIT_COMMITTER_EMAIL": "afk@test.invalid",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        return env

    def _config(self) -> dict[str, Any]:
        spec = self.spec
        scheduler = {
            "lease_s": spec.lease_s,
            "heartbeat_s": spec.heartbeat_s,
            "sweep_interval_s": spec.sweep_interval_s,
            "claim_interval_s": spec.claim_interval_s,
            "cancel_check_s": spec.heartbeat_s,
            "max_attempts": spec.max_attempts,
            "max_recoveries": spec.max_recoveries,
            "backoff_base_s": spec.backoff_base_s,
            "backoff_max_s": spec.backoff_max_s,
            "run_timeout_s": spec.run_timeout_s,
            "kill_grace_s": 1,
        }
        agent = {
            "kind": "command",
            "command": [sys.executable, str(self.agent), "{prompt_file}", "{workdir}"],
            "idle_timeout_s": spec.idle_timeout_s,
            "exit_grace_s": 1,
            "env": dict(spec.agent_env),
        }
        base = {
            "database_url": self.database_url,
            "volume": str(self.root / "volume"),
            "poll_interval_s": 0.3,
            "max_concurrency": spec.max_concurrency,
            "sandbox": {"writable_paths": [str(agent_area(self.root))]},
            "scheduler": scheduler,
            "http": {"listen": f"127.0.0.1:{self.port}"},
            "trackers": {"local": {"kind": "local"}},
            "agents": {"scripted": agent},
            "repos": {name: self._repo(name, url) for name, url in self.remotes.items()},
        }
        return merged(base, spec.config)

    def _repo(self, name: str, url: str) -> dict[str, Any]:
        return {
            "tracker": self.spec.tracker,
            "slug": f"demo/{name}",
            "remote_url": self.spec.remote_urls.get(name, url),
            "test_command": self.spec.test_command,
            "agent": self.spec.agent_name,
        }

    # -- database ------------------------------------------------------------------

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.database_url)
        return self._store

    def migrate(self) -> None:
        self.cli("db", "upgrade")

    def file_issue(self, repo: str, title: str, body: str = "", by: str = "maintainer") -> int:
        """A local issue with the ready label; its number."""
        return self.store.add_local_issue(repo, title, body, author=by, labels=(READY,)).id

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- processes -----------------------------------------------------------------

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
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

    def daemon(self, name: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``pipeline run``; its output goes to ``<root>/<name>.log``."""
        log = self.root / f"{name}.log"
        self.logs.append(log)
        # Each daemon name has its own HTTP port (the first one the config's), so replicas
        # run side by side and a restarted daemon listens where it did before.
        port = self._ports.setdefault(name, self.port if not self._ports else free_port())
        listen = {"PIPELINE_HTTP_LISTEN": f"127.0.0.1:{port}"}
        with log.open("ab") as handle:
            return subprocess.Popen(
                [sys.executable, "-m", "pipeline", "run", "--config", str(self.config)],
                env={**self.env, **listen, **(env or {})},
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def wait(
        self, predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.1
    ) -> float:
        """Poll ``predicate``; the seconds it took. Raise with the runs when it times out."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if predicate():
                return time.monotonic() - start
            time.sleep(interval_s)
        raise AssertionError(
            f"{what}: not reached in {timeout_s} s; runs: {self.runs()}\n{self.log_text()[-3000:]}"
        )

    # -- reading the outcome -------------------------------------------------------

    def runs(self) -> list[Any]:
        from pipeline.store import RunFilter

        return self.store.list_runs(RunFilter(limit=10_000))

    def pushes_by_run(self) -> dict[int, int]:
        """How many commits on each remote (all refs) carry ``Afk-Run: <id>``, per run id."""
        return commits_by_run(self.remotes.values())

    def issue_views(self, *, must_ship: bool = True) -> list[IssueView]:
        """Every local issue with its comments, as a user of the tracker sees it."""
        return [
            IssueView(
                repo=issue.repo,
                number=issue.id,
                closed=issue.state == "closed",
                comments=tuple(c.body for c in self.store.local_comments(issue.id)),
                must_ship=must_ship,
            )
            for issue in self.store.list_local_issues(state=None)
        ]


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 20) -> int:
    """SIGTERM the daemon's group, SIGKILL it if it lingers; its exit code."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()
    return int(proc.returncode)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the daemon and every process of its group (its agents included)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
