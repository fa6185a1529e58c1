"""Crash and fencing: daemon processes killed with SIGKILL or paused with SIGSTOP mid-run."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from pipeline.store import RunEvent, Store
from pipeline.store.engine import make_engine
from pipeline.store.models import RunRow
from pipeline.testing.daemons import DaemonProcess, kill_pid_group, start_daemon
from pipeline.testing.databases import open_store
from pipeline.testing.invariants import InvariantMonitor

LEASE_S = 2.0
SWEEP_S = 0.2
WAIT_S = 60.0
FAST = ["--heartbeat-s", "0.4", "--sweep-interval-s", str(SWEEP_S), "--kill-grace-s", "0.5"]

pytestmark = pytest.mark.slow


@pytest.fixture
def store(store: Store) -> Store:
    """The shared store with alpha enrolled."""
    store.ensure_repo("alpha")
    return store


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    started: list[DaemonProcess] = []

    def start(url: str, owner: str, agent_s: float, *extra: str) -> DaemonProcess:
        daemon = start_daemon(
            url, owner, tmp_path, lease_s=LEASE_S, agent_s=agent_s, extra=[*FAST, *extra]
        )
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


def wait_for(predicate: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout_s} s")


def agent_pid(store: Store, run_id: int, attempt: int) -> int | None:
    for event in store.run_events(run_id):
        if event.kind == "agent" and event.attempt == attempt:
            return int(event.data["pid"])
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def terminal_events(events: list[RunEvent]) -> list[str]:
    ends = ("succeeded", "failed", "escalated", "cancelled")
    return [
        str(e.data["state"]) for e in events if e.kind == "state" and e.data.get("state") in ends
    ]


@pytest.mark.parametrize("recoverer", ["restarted", "replica"])
def test_kill9_mid_run_is_recovered_by_the_lease_sweep(
    store: Store,
    database_url: str,
    daemons: Callable[..., DaemonProcess],
    recoverer: str,
) -> None:
    """A run orphaned by kill -9 is put back in line by a sweep of its lease and ends once."""
    run_id = store.enqueue("alpha").run.id
    follower = store.enqueue("alpha").run.id
    with InvariantMonitor(database_url, cap=4) as monitor:
        first = daemons(database_url, "first", 60)
        orphan = wait_for(lambda: agent_pid(store, run_id, 1))
        if recoverer == "replica":
            daemons(database_url, "second", 0.5)
        try:
            first.signal(signal.SIGKILL)
            first.proc.wait()
            if recoverer == "restarted":
                daemons(database_url, "restarted", 0.5)
            wait_for(lambda: store.get_run(run_id).attempt >= 2)  # type: ignore[union-attr]
            final = wait_for(lambda: (r := store.get_run(run_id)) and r.terminal and r)
            wait_for(lambda: store.get_run(follower).terminal)  # type: ignore[union-attr]
        finally:
            kill_pid_group(orphan)
    swept = [e.data for e in store.run_events(run_id) if e.kind == "state" and e.data.get("sweep")]
    assert swept[0] == {"state": "retry_wait", "owner": "first", "sweep": True}  # lease expired
    assert (final.state, final.recoveries, final.failures) == ("succeeded", 1, 0)
    assert terminal_events(store.run_events(run_id)) == ["succeeded"]
    assert monitor.seen.violations == [] and monitor.seen.polls > 10


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:
    """A store on PostgreSQL only, with alpha enrolled."""
    with open_store(postgres_url, repos=("alpha",)) as s:
        yield s


@pytest.mark.postgres
def test_paused_worker_is_superseded_and_fenced(
    pg_store: Store, daemons: Callable[..., DaemonProcess], postgres_url: str
) -> None:
    """A worker paused past its lease is superseded; resumed, its writes fail and its agent dies."""
    store = pg_store
    run_id = store.enqueue("alpha").run.id
    paused = daemons(postgres_url, "paused", 60, "--tick-events")
    old_agent = wait_for(lambda: agent_pid(store, run_id, 1))
    wait_for(lambda: any(e.kind == "tick" for e in store.run_events(run_id)))
    paused.signal(signal.SIGSTOP)
    daemons(postgres_url, "replica", 3)
    wait_for(lambda: store.get_run(run_id).owner == "replica")  # type: ignore[union-attr]
    mark = store.last_event_id()
    paused.signal(signal.SIGCONT)
    wait_for(lambda: not pid_alive(old_agent), timeout_s=20)
    final = wait_for(lambda: (r := store.get_run(run_id)) and r.terminal and r)
    late = [e for e in store.run_events(run_id, after_id=mark) if e.attempt == 1]
    assert late == []
    assert (final.state, final.attempt) == ("succeeded", 2)
    assert terminal_events(store.run_events(run_id)) == ["succeeded"]
    assert "write rejected, lease lost" in paused.log()


@pytest.mark.postgres
def test_a_worker_stopped_inside_a_transaction_does_not_block_the_sweep(
    pg_store: Store, daemons: Callable[..., DaemonProcess], postgres_url: str
) -> None:
    """A worker stopped between two statements of a transaction holds the run's row lock;
    the server ends that session, so a replica's sweep still takes the run over."""
    store = pg_store
    run_id = store.enqueue("alpha").run.id
    paused = daemons(postgres_url, "paused", 60)
    old_agent = wait_for(lambda: agent_pid(store, run_id, 1))
    paused.signal(signal.SIGSTOP)
    # The stopped worker's session, as the pipeline opens it, mid-way through a write.
    stalled = make_engine(postgres_url)
    conn = stalled.connect()
    try:
        conn.begin()
        touch = update(RunRow).where(RunRow.id == run_id).values(lease_until=RunRow.lease_until)
        conn.execute(touch)
        daemons(postgres_url, "replica", 3)
        wait_for(lambda: store.get_run(run_id).owner == "replica")  # type: ignore[union-attr]
        paused.signal(signal.SIGCONT)
        wait_for(lambda: not pid_alive(old_agent))
        final = wait_for(lambda: (r := store.get_run(run_id)) and r.terminal and r)
    finally:
        paused.signal(signal.SIGCONT)
        with contextlib.suppress(Exception):
            conn.close()
        stalled.dispose()
    assert (final.state, final.attempt) == ("succeeded", 2)
    assert terminal_events(store.run_events(run_id)) == ["succeeded"]
