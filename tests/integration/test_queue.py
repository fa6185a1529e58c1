"""The Scheduler on SQLite and PostgreSQL: outcomes, retries, cancel, timeouts, lost leases."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import update

from pipeline.config.settings import SchedulerSettings
from pipeline.core.errors import CancelRequested, EscalationError, FatalError, RetryableError
from pipeline.queue.scheduler import RunContext, Scheduler
from pipeline.store import EnqueueOptions, Run, Store
from pipeline.store.models import RunRow
from pipeline.testing.dummy_daemon import dummy_pipeline

SETTINGS = SchedulerSettings(
    lease_s=2.0,
    heartbeat_s=0.3,
    sweep_interval_s=0.2,
    claim_interval_s=0.1,
    backoff_base_s=0.01,
    backoff_max_s=0.05,
    kill_grace_s=0.5,
    cancel_check_s=0.3,
    max_recoveries=3,
)
WAIT_S = 30.0


@pytest.fixture
def store(store: Store) -> Store:
    """The shared store with alpha and beta enrolled."""
    store.ensure_repo("alpha")
    store.ensure_repo("beta")
    return store


def wait_for(predicate: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout_s} s")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


def agent_pid(store: Store, run_id: int, attempt: int = 1) -> int | None:
    for event in store.run_events(run_id):
        if event.kind == "agent" and event.attempt == attempt:
            return int(event.data["pid"])
    return None


def terminal(store: Store, run_id: int) -> Run | None:
    run = store.get_run(run_id)
    return run if run is not None and run.terminal else None


@pytest.fixture
def scheduler_factory(store: Store) -> Iterator[Callable[..., Scheduler]]:
    made: list[Scheduler] = []

    def make(pipeline: Callable[[RunContext], str | None], **kwargs: Any) -> Scheduler:
        options: dict[str, Any] = {"settings": SETTINGS, "max_concurrency": 4, "owner": "w1"}
        options.update(kwargs)
        on_settled = options.pop("on_settled", None)
        scheduler = Scheduler(options.pop("store", store), pipeline, **options)
        scheduler.on_settled = on_settled
        made.append(scheduler)
        scheduler.start()
        return scheduler

    yield make
    for scheduler in made:
        scheduler.stop(0.0)


def test_runs_succeed_and_on_finished_sees_them(store: Store, scheduler_factory: Any) -> None:
    """Each run executes the pipeline once, ends succeeded and is reported to on_finished."""
    finished: list[Run] = []

    def pipeline(ctx: RunContext) -> None:
        ctx.set_state("implementing")
        ctx.update(head_sha="abc123")
        ctx.events("log", "working")

    ids = [store.enqueue(repo).run.id for repo in ("alpha", "beta", "alpha")]
    scheduler = scheduler_factory(pipeline, on_finished=finished.append)
    assert scheduler.wait_idle(WAIT_S)
    assert sorted(r.id for r in finished) == ids
    run = store.get_run(ids[0])
    assert run is not None and (run.state, run.head_sha, run.attempt) == ("succeeded", "abc123", 1)
    kinds = [e.kind for e in store.run_events(ids[0])]
    assert kinds == ["queued", "claimed", "state", "log", "state"]


def test_an_ending_being_announced_does_not_hold_the_slot(
    store: Store, scheduler_factory: Any
) -> None:
    """With one slot, the next run starts while the last one's ending is still being told
    (a forge pacing its writes), but not before ``on_settled`` (the freeze) has returned;
    ``wait_idle`` and ``stop`` wait for the announcement."""
    settle_gate, announce_gate = threading.Event(), threading.Event()
    settled: list[int] = []
    announced: list[int] = []
    started: list[int] = []

    def on_settled(run: Run) -> None:
        settle_gate.wait(WAIT_S)
        settled.append(run.id)

    def on_finished(run: Run) -> None:
        announce_gate.wait(WAIT_S)
        announced.append(run.id)

    first, second = (store.enqueue(repo).run.id for repo in ("alpha", "beta"))
    scheduler = scheduler_factory(
        lambda ctx: started.append(ctx.run.id),
        on_settled=on_settled,
        on_finished=on_finished,
        max_concurrency=1,
    )
    wait_for(lambda: terminal(store, first))
    time.sleep(0.5)  # several claim ticks: the slot is still held while settling
    assert started == [first] and settled == []
    settle_gate.set()
    wait_for(lambda: terminal(store, second))
    assert started == [first, second] and announced == []
    assert not scheduler.wait_idle(0.3)
    announce_gate.set()
    assert scheduler.wait_idle(WAIT_S)
    assert sorted(announced) == [first, second]


def test_stop_waits_for_an_ending_being_announced(store: Store, scheduler_factory: Any) -> None:
    """A stop gives an announcement its grace rather than dropping it mid-way."""
    gate = threading.Event()
    announced: list[int] = []

    def on_finished(run: Run) -> None:
        gate.wait(WAIT_S)
        announced.append(run.id)

    run_id = store.enqueue("alpha").run.id
    scheduler = scheduler_factory(lambda ctx: None, on_finished=on_finished)
    wait_for(lambda: terminal(store, run_id))
    threading.Timer(0.3, gate.set).start()
    scheduler.stop(WAIT_S)
    assert announced == [run_id]


@pytest.mark.parametrize(
    ("error", "state", "error_class", "attempts"),
    [
        (FatalError("config", "no test command"), "failed", "config", 1),
        (EscalationError("blocked", "agent is blocked"), "escalated", "blocked", 1),
        (RetryableError("network", "connection reset"), "failed", "network", 2),
        (ValueError("a bug"), "failed", "internal", 2),
    ],
)
def test_classified_errors_decide_the_outcome(
    store: Store,
    scheduler_factory: Any,
    error: Exception,
    state: str,
    error_class: str,
    attempts: int,
) -> None:
    """Fatal fails, escalation escalates, retryable and internal errors retry up to max_attempts."""

    def pipeline(ctx: RunContext) -> None:
        raise error

    run_id = store.enqueue("alpha", EnqueueOptions(max_attempts=2)).run.id
    scheduler_factory(pipeline)
    run = wait_for(lambda: terminal(store, run_id))
    assert (run.state, run.error_class, run.attempt) == (state, error_class, attempts)
    if error_class == "internal":
        tracebacks = [e for e in store.run_events(run_id) if e.kind == "error"]
        assert len(tracebacks) == 2 and "ValueError: a bug" in tracebacks[0].data["traceback"]


def test_retryable_error_then_success(store: Store, scheduler_factory: Any) -> None:
    """A transient failure retries after a backoff and the next attempt succeeds."""

    def pipeline(ctx: RunContext) -> None:
        if ctx.attempt == 1:
            raise RetryableError("agent_overloaded", "529 overloaded", retry_after_s=0.2)

    run_id = store.enqueue("alpha").run.id
    scheduler_factory(pipeline)
    run = wait_for(lambda: terminal(store, run_id))
    assert (run.state, run.attempt, run.failures) == ("succeeded", 2, 1)
    retry = [e for e in store.run_events(run_id) if e.data.get("state") == "retry_wait"]
    assert retry and retry[0].data["delay_s"] >= 0.2


def test_cancel_of_a_running_run_kills_its_agent(store: Store, scheduler_factory: Any) -> None:
    """A cancelled running run ends cancelled, its agent killed, never retried."""
    run_id = store.enqueue("alpha").run.id
    scheduler_factory(dummy_pipeline(60))
    pid = wait_for(lambda: agent_pid(store, run_id))
    store.cancel_run(run_id, by="alice")
    run = wait_for(lambda: terminal(store, run_id))
    assert (run.state, run.attempt) == ("cancelled", 1)
    assert not pid_alive(pid)
    time.sleep(SETTINGS.sweep_interval_s * 3)
    assert store.get_run(run_id).state == "cancelled"  # type: ignore[union-attr]


def test_timeout_kills_the_agent_and_fails_when_attempts_are_used(
    store: Store, scheduler_factory: Any
) -> None:
    """An execution timeout kills the agent's group and counts as a retryable timeout."""
    run_id = store.enqueue("alpha", EnqueueOptions(timeout_s=1.0, max_attempts=1)).run.id
    scheduler_factory(dummy_pipeline(60))
    pid = wait_for(lambda: agent_pid(store, run_id))
    run = wait_for(lambda: terminal(store, run_id))
    assert (run.state, run.error_class) == ("failed", "timeout")
    assert not pid_alive(pid)


def test_a_timeout_is_never_recorded_as_a_cancel(store: Store, scheduler_factory: Any) -> None:
    """A pipeline that raises CancelRequested once stopped by its time limit ends ``timeout``."""

    def stopped_agent(ctx: RunContext) -> str | None:
        ctx.set_state("implementing")
        ctx.stop.wait(60)
        raise CancelRequested(f"tests stopped: {ctx.stop.reason}")  # as the test gate does

    run_id = store.enqueue("alpha", EnqueueOptions(timeout_s=0.5, max_attempts=1)).run.id
    scheduler_factory(stopped_agent)
    run = wait_for(lambda: terminal(store, run_id))
    assert (run.state, run.error_class) == ("failed", "timeout")
    assert "time limit of 0.5 s" in (run.error or "")


def test_queue_wait_does_not_count_toward_the_timeout(store: Store, scheduler_factory: Any) -> None:
    """A run that waited in the queue longer than its timeout still runs to completion."""

    def pipeline(ctx: RunContext) -> None:
        ctx.stop.wait(2.5 if ctx.run.timeout_s is None else 0.3)
        ctx.check()

    blocker = store.enqueue("alpha").run.id
    patient = store.enqueue("alpha", EnqueueOptions(timeout_s=1.5, max_attempts=1)).run.id
    scheduler_factory(pipeline)
    run = wait_for(lambda: terminal(store, patient))
    blocked = store.get_run(blocker)
    assert blocked is not None and blocked.finished_at is not None
    assert run.state == "succeeded"
    # It started only once the blocker had run its 2.5 s, so it waited past its 1.5 s timeout.
    assert run.started_at is not None and blocked.finished_at <= run.started_at


def _steal(store: Store, run_id: int) -> None:
    """Expire the lease in the database and let another owner claim the run."""
    with store.engine.begin() as conn:
        conn.execute(
            update(RunRow)
            .where(RunRow.id == run_id)
            .values(lease_until=store.now().replace(year=2000))
        )
    store.sweep(max_recoveries=3)  # or the scheduler's own sweep, whichever comes first
    wait_for(lambda: (run := store.get_run(run_id)) is not None and run.state == "queued")
    thief = store.claim_next("thief", max_concurrency=10, lease_s=60)
    assert thief is not None and thief.id == run_id


def test_lost_lease_kills_the_agent_and_writes_nothing(
    store: Store, scheduler_factory: Any
) -> None:
    """A worker superseded by another owner kills its agent and writes nothing more."""
    finished: list[Run] = []
    run_id = store.enqueue("alpha").run.id
    # One slot, held by the superseded worker: the requeue wakes it, but it cannot race the thief.
    scheduler = scheduler_factory(
        dummy_pipeline(60), on_finished=finished.append, max_concurrency=1
    )
    pid = wait_for(lambda: agent_pid(store, run_id))
    _steal(store, run_id)
    wait_for(lambda: not pid_alive(pid))
    wait_for(lambda: scheduler.running == [])
    run = store.get_run(run_id)
    assert run is not None and (run.owner, run.attempt, run.state) == ("thief", 2, "preparing")
    by_worker = [
        e.kind for e in store.run_events(run_id) if e.attempt == 1 and not e.data.get("sweep")
    ]
    assert by_worker == ["claimed", "state", "agent"] and finished == []


class FlakyStore:
    """A store whose heartbeats fail, as when the database is unreachable."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = False
        self.failed_heartbeats = 0

    def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            self.failed_heartbeats += 1
            raise ConnectionError("database unreachable")
        return self._store.heartbeat(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_worker_that_cannot_renew_stops_on_its_own(store: Store, scheduler_factory: Any) -> None:
    """Unable to renew its lease, a worker keeps trying, then kills its agent."""
    flaky = FlakyStore(store)
    run_id = store.enqueue("alpha").run.id
    scheduler_factory(dummy_pipeline(60), store=flaky)
    pid = wait_for(lambda: agent_pid(store, run_id))
    flaky.down = True
    wait_for(lambda: not pid_alive(pid))
    assert flaky.failed_heartbeats >= 2  # not killed at the first failed renewal


def test_stop_leaves_running_work_to_lease_recovery(store: Store, scheduler_factory: Any) -> None:
    """stop(grace) stops the agent and writes nothing; the sweeper requeues the run."""
    run_id = store.enqueue("alpha").run.id
    scheduler = scheduler_factory(dummy_pipeline(60))
    pid = wait_for(lambda: agent_pid(store, run_id))
    scheduler.stop(0.2)
    assert not pid_alive(pid)
    run = store.get_run(run_id)
    assert run is not None and (run.state, run.owner) == ("implementing", "w1")
    wait_for(lambda: store.sweep(max_recoveries=3).recovered == [run_id])
    assert store.get_run(run_id).state == "queued"  # type: ignore[union-attr]


def test_pipeline_ignoring_its_stop_is_abandoned_and_the_run_ends(
    store: Store, scheduler_factory: Any
) -> None:
    """A pipeline deaf to cancel is abandoned after the kill grace; the run still ends cancelled."""
    release = threading.Event()
    finished: list[Run] = []

    def deaf(ctx: RunContext) -> None:
        ctx.set_state("implementing")
        release.wait(WAIT_S)  # never looks at ctx.stop

    run_id = store.enqueue("alpha").run.id
    scheduler = scheduler_factory(deaf, on_finished=finished.append)
    wait_for(lambda: store.get_run(run_id).state == "implementing")  # type: ignore[union-attr]
    store.cancel_run(run_id, by="alice")
    try:
        run = wait_for(lambda: terminal(store, run_id))
        wait_for(lambda: finished)  # told right after the outcome is written
        assert run.state == "cancelled" and [r.id for r in finished] == [run_id]
        wait_for(lambda: scheduler.running == [])
    finally:
        release.set()
