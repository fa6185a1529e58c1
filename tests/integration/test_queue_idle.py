"""An idle claim loop: it sleeps until work is due, yet misses nothing that becomes due."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.settings import SchedulerSettings
from pipeline.core.errors import RetryableError
from pipeline.queue import scheduler as scheduler_module
from pipeline.queue.scheduler import RunContext, Scheduler
from pipeline.store import Run, Store
from pipeline.store import wake as wake_module
from pipeline.store.wake import QueueWake
from pipeline.testing.databases import open_store

from .test_queue import SETTINGS, WAIT_S, terminal, wait_for

# No tick, no periodic sweep and no idle re-check within a test: only a wake, a commit
# seen or a due time can make the claim loop look at the queue.
NO_TICK = dataclasses.replace(SETTINGS, claim_interval_s=3600.0, sweep_interval_s=3600.0)
QUIET_WINDOW = 20  # claim intervals an idle scheduler is watched for


@pytest.fixture
def store(store: Store) -> Store:
    store.ensure_repo("alpha")
    return store


@pytest.fixture(autouse=True)
def no_idle_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module, "IDLE_RECHECK_S", 3600.0)


class CountingStore:
    """The store, counting claim attempts."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.claims = 0

    def claim_next(self, *args: Any, **kwargs: Any) -> Run | None:
        self.claims += 1
        run: Run | None = self._store.claim_next(*args, **kwargs)
        return run

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def start() -> Iterator[Callable[..., Scheduler]]:
    made: list[Scheduler] = []

    def make(store: Any, pipeline: Callable[[RunContext], None], settings: SchedulerSettings):
        scheduler = Scheduler(store, pipeline, settings=settings, max_concurrency=2, owner="w")
        made.append(scheduler)
        scheduler.start()
        return scheduler

    yield make
    for scheduler in made:
        scheduler.stop(0.0)


def test_a_retry_is_claimed_when_its_time_comes_without_a_tick(
    store: Store, start: Callable[..., Scheduler]
) -> None:
    """A run waiting out a retry delay is requeued and claimed at its due time, though no
    tick, periodic sweep or idle re-check would ever look."""
    attempts: list[int] = []

    def pipeline(ctx: RunContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RetryableError("network", "reset", retry_after_s=0.3)

    run_id = store.enqueue("alpha").run.id
    start(store, pipeline, NO_TICK)
    ended = wait_for(lambda: terminal(store, run_id))
    assert (ended.state, attempts) == ("succeeded", [1, 2])


def test_an_enqueue_by_another_process_wakes_an_idle_claimer(
    store: Store, start: Callable[..., Scheduler]
) -> None:
    """A run queued through another connection (as by the CLI, another process) is claimed
    although no in-process wake fires and the idle re-check is far away: SQLite sees the
    commit, PostgreSQL the NOTIFY."""
    settings = dataclasses.replace(NO_TICK, claim_interval_s=0.05)
    ran = threading.Event()
    start(store, lambda ctx: ran.set(), settings)
    other = Store(store.url)
    try:
        other.enqueue("alpha")
    finally:
        other.close()
    assert ran.wait(WAIT_S)


def test_an_idle_claimer_does_not_look_at_the_queue_when_nothing_changed(
    store: Store, start: Callable[..., Scheduler]
) -> None:
    """Nothing queued and nothing committed: after its first look, the claim loop makes no
    claim attempt over many claim intervals; a run queued then is claimed at once."""
    settings = dataclasses.replace(NO_TICK, claim_interval_s=0.05)
    counting = CountingStore(store)
    ran = threading.Event()
    scheduler = start(counting, lambda ctx: ran.set(), settings)
    assert scheduler.queue_wake is not None and scheduler.queue_wake.wait_listening(WAIT_S)
    wait_for(lambda: counting.claims >= 1)
    pause = threading.Event()
    pause.wait(settings.claim_interval_s * QUIET_WINDOW)  # start-up wakes settle
    looked = counting.claims
    pause.wait(settings.claim_interval_s * QUIET_WINDOW)
    assert counting.claims == looked
    store.enqueue("alpha")
    assert ran.wait(WAIT_S)


def test_stopping_wakes_the_listener_instead_of_waiting_out_its_timeout(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the listener blocks on its connection; a stop notifies a channel of its
    own, so the thread ends within stop's join even when the wait would last a minute.
    (SQLite has no listener thread: its wake is a connection event.)"""
    monkeypatch.setattr(wake_module, "LISTEN_TIMEOUT_S", 60.0)
    calls: list[int] = []
    with open_store(postgres_url) as store:
        wake = QueueWake(store.engine, str(store.url), lambda: calls.append(1))
        wake.start()
        assert wake.wait_listening(WAIT_S)
        wake.stop()
        assert wake._thread is not None and not wake._thread.is_alive()


STOP_WHILE_LOOKING = """
import sys, threading
from pipeline.store.wake import QueueWake
from pipeline.testing.databases import open_store

with open_store(sys.argv[1]) as store:
    for _ in range(int(sys.argv[2])):
        wake = QueueWake(store.engine, str(store.url), lambda: None)
        wake.start()
        done = threading.Event()

        def look() -> None:
            while not done.is_set():
                wake.quiet()

        looker = threading.Thread(target=look)
        looker.start()
        wake.stop()
        done.set()
        looker.join()
print("survived")
"""


def test_stopping_while_the_claim_thread_looks_for_commits_is_safe(
    tmp_path: Path,
) -> None:
    """The claim thread asks ``quiet()`` while ``stop()`` runs on another thread. On SQLite
    ``quiet`` reads from a connection ``stop`` closes; closing it under a running statement
    crashed the whole process. Run in a child so a crash fails this test, not the suite."""
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    with open_store(url) as store:
        store.ensure_repo("alpha")
    child = subprocess.run(
        [sys.executable, "-c", STOP_WHILE_LOOKING, url, "300"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "survived"
