"""Regression tests for what the reliability campaign found, one per fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sqlalchemy import event

from pipeline.agents.base import AgentRequest
from pipeline.agents.command import CommandAgent
from pipeline.config.settings import (
    AgentPreset,
    ProbeSettings,
    RepoSettings,
    Settings,
    TrackerSettings,
)
from pipeline.core.errors import RetryableError
from pipeline.core.masking import register_secret
from pipeline.core.proc import kill_stragglers
from pipeline.intake.service import Intake
from pipeline.store import SeenIssue, Store
from pipeline.watch.deploy import command_probe


def test_command_probe_never_sees_nor_prints_a_daemon_secret() -> None:
    """A deploy probe gets no variable holding a pipeline secret, under any name."""
    secret = f"sntl-{uuid.uuid4().hex}"
    register_secret(secret)
    script = "import os; print(sorted(os.environ.items())); print('echo', os.sys.argv[1:])"
    probe = ProbeSettings(kind="command", command=(sys.executable, "-c", script, secret))
    result = command_probe(probe, "a" * 40, env={"PLAIN_NAME": secret, "KEEP": "visible"})
    assert secret not in result.output
    assert "PLAIN_NAME" not in result.output
    assert "'KEEP', 'visible'" in result.output


def test_command_agent_killed_by_a_signal_is_a_crash(tmp_path: Path) -> None:
    """An agent that dies by SIGSEGV is RetryableError('agent_crash'), not an agent answer."""
    preset = AgentPreset(
        name="c",
        kind="command",
        command=(sys.executable, "-c", "import os; os.kill(os.getpid(), 11)"),
    )
    request = AgentRequest(
        prompt="p", workdir=tmp_path, env={"PATH": "/usr/bin:/bin"}, home=tmp_path / "home"
    )
    with pytest.raises(RetryableError) as info:
        CommandAgent(preset).run(request, events=lambda *a, **k: None, stop=None)
    assert info.value.kind == "agent_crash"


class _OverlapTracker:
    """``list_ready`` that notes how many polls are inside it at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.lock = threading.Lock()
        self.both = threading.Event()

    def list_ready(self, slug: str) -> list[object]:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
            if self.inside == 2:
                self.both.set()
        self.both.wait(0.5)  # overlapping polls meet here; a lone poll waits briefly
        with self.lock:
            self.inside -= 1
        return []


def test_overlapping_polls_are_serialised(tmp_path: Path) -> None:
    """The start-up poll and a periodic poll at once: neither raises, they never overlap."""
    tracker = _OverlapTracker()
    settings = Settings(
        database_url="sqlite://",
        volume=tmp_path,
        trackers=(TrackerSettings(name="local", kind="local"),),
        repos=(RepoSettings(name="r", tracker="local", slug="o/r", remote_url="x"),),
    )
    # The tracker lists nothing and no run escalated: no other verb.
    store = SimpleNamespace(
        issues_in_queue=set, list_runs=lambda flt: [], clear_waiting=lambda repo, keep: None
    )
    intake = Intake(cast(Any, store), settings, {"local": cast(Any, tracker)}, cast(Any, None))
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            intake.poll("local")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=poll) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert errors == [] and tracker.most == 1


def _spawn_daemon_with_child_in(tree: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A stand-in daemon (own session) whose child sleeps inside ``tree``; (daemon, child pid)."""
    script = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen(['sleep', '60'], cwd={str(tree)!r})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    daemon = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    assert daemon.stdout is not None
    return daemon, int(daemon.stdout.readline())


def test_kill_stragglers_spares_the_daemon_that_owns_a_straggler(tmp_path: Path) -> None:
    """A daemon's git child in a reused tree is killed alone, never the daemon's whole group."""
    tree = tmp_path / "tree"
    tree.mkdir()
    daemon, child = _spawn_daemon_with_child_in(tree)
    agent = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], cwd=tree, start_new_session=True)
    try:
        found = kill_stragglers(tree)
        assert child in found and agent.pid in found
        assert agent.wait(5) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child}").exists() and _state(child) != "Z":
            assert time.monotonic() < deadline, "the straggler survived"
            time.sleep(0.02)
        assert daemon.poll() is None, "the straggler's daemon was killed with it"
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        if daemon.stdout is not None:
            daemon.stdout.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


@pytest.mark.postgres
def test_upsert_issue_survives_another_replica_inserting_first(postgres_url: str) -> None:
    """Two replicas see a new issue at once: the loser's INSERT becomes an update, not a crash."""
    first, second = Store(postgres_url), Store(postgres_url)
    first.upgrade()
    first.ensure_repo("widgets")
    fields: dict[str, Any] = {"tracker": "local", "number": 7, "author": "a", "url": "u"}
    raced: list[int] = []

    def other_replica_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO ISSUES") and not raced:
            raced.append(second.upsert_issue("widgets", SeenIssue(title="theirs", **fields)).id)

    event.listen(first.engine, "before_cursor_execute", other_replica_first)
    try:
        mine = first.upsert_issue("widgets", SeenIssue(title="mine", **fields))
    finally:
        event.remove(first.engine, "before_cursor_execute", other_replica_first)
        first.close()
        second.close()
    assert raced == [mine.id] and mine.title == "mine"


@pytest.mark.postgres
def test_sync_repos_survives_replicas_starting_together(postgres_url: str) -> None:
    """Two replicas enrol the same repo at start: the loser's INSERT becomes an update."""
    first, second = Store(postgres_url), Store(postgres_url)
    first.upgrade()
    repo = RepoSettings(name="widgets", tracker="local", slug="o/widgets", remote_url="x")
    raced: list[bool] = []

    def other_replica_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO REPOS") and not raced:
            raced.append(True)
            second.sync_repos([repo])

    event.listen(first.engine, "before_cursor_execute", other_replica_first)
    try:
        first.sync_repos([repo])
        names = [r.name for r in first.list_repos()]
    finally:
        event.remove(first.engine, "before_cursor_execute", other_replica_first)
        first.close()
        second.close()
    assert raced == [True] and names == ["widgets"]


FLOOD_OF_BLOCKED = """
import sys
print("BLOCKED: the first reason")
for i in range(20_000):
    sys.stdout.write("BLOCKED: " + str(i) + " " + "x" * 4000 + "\\n")
print("BLOCKED: the last reason")
print("BLOCKED:   ")
"""


def test_command_agent_flooding_blocked_lines_keeps_the_last_reason_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """80 MB of ``BLOCKED:`` lines (a looping or hostile agent) are not all kept: only
    the last line that gives a reason counts, and only it is remembered."""
    preset = AgentPreset(name="c", kind="command", command=(sys.executable, "-c", FLOOD_OF_BLOCKED))
    request = AgentRequest(
        prompt="p", workdir=tmp_path, env={"PATH": "/usr/bin:/bin"}, home=tmp_path / "home"
    )
    tracemalloc.start()
    try:
        result = CommandAgent(preset).run(request, events=lambda *a, **k: None, stop=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.blocked_reason == "the last reason"
    assert peak < 16 << 20, f"peak {peak >> 20} MiB"
