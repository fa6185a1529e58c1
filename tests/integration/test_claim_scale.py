"""The scaled claim path: no global lock, constant statements, the cap in the database, wake."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import IntegrityError

from pipeline.queue.scheduler import RunContext, Scheduler
from pipeline.store import Store
from pipeline.store.models import BUSY_STATES, RunRow
from pipeline.testing.invariants import InvariantMonitor
from tests.integration.sql_log import StatementLog
from tests.integration.test_queue import SETTINGS, wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    s = Store(database_url)
    s.upgrade()
    for name in ("alpha", "beta", "gamma", "delta"):
        s.ensure_repo(name)
    yield s
    s.close()


def _enqueue(store: Store, per_repo: int) -> None:
    for _ in range(per_repo):
        for name in ("alpha", "beta", "gamma", "delta"):
            store.enqueue(name)


@pytest.mark.postgres
def test_a_postgres_claim_is_one_statement_whatever_the_queue(postgres_url: str) -> None:
    """On PostgreSQL one claim sends one SQL statement, with 4 or with 200 runs queued."""
    store = Store(postgres_url)
    store.upgrade()
    for name in ("alpha", "beta", "gamma", "delta"):
        store.ensure_repo(name)
    try:
        counts = []
        for per_repo in (1, 50):
            _enqueue(store, per_repo)
            with StatementLog(store.engine) as log:
                run = store.claim_next("w", max_concurrency=10, lease_s=60)
            assert run is not None and run.state == "preparing" and run.repo_name
            store.finish(run.id, "w", run.attempt, "succeeded")
            counts.append(log.count() - log.count("SELECT 1"))  # the pool's pre-ping
        assert counts == [1, 1]
        claimed = [e for e in store.run_events(run.id) if e.kind == "claimed"]
        assert claimed[-1].data == {"attempt": 1, "owner": "w"}
    finally:
        store.close()


@pytest.mark.postgres
def test_a_claim_skips_a_repo_another_replica_is_claiming(postgres_url: str) -> None:
    """While another replica holds alpha mid-claim, a claim takes beta's run without waiting."""
    store = Store(postgres_url)
    store.upgrade()
    alpha, beta = store.ensure_repo("alpha"), store.ensure_repo("beta")  # their ids
    first = store.enqueue("alpha").run.id
    second = store.enqueue("beta").run.id
    other = Store(postgres_url)
    try:
        with other.engine.connect() as conn, conn.begin():
            conn.execute(
                text("SELECT id FROM repos WHERE id = :id FOR NO KEY UPDATE"), {"id": alpha}
            )
            run = store.claim_next("w", max_concurrency=10, lease_s=60)
            assert run is not None and (run.id, run.repo_id) == (second, beta)
        again = store.claim_next("w2", max_concurrency=10, lease_s=60)
        assert again is not None and again.id == first
    finally:
        other.close()
        store.close()


@pytest.mark.postgres
def test_a_claim_never_jumps_a_queued_run_another_replica_holds(postgres_url: str) -> None:
    """While another replica holds alpha's head run (a claim that will fail and roll back), a
    claim does not take alpha's next run in its place: each repo's runs start in order."""
    store = Store(postgres_url)
    store.upgrade()
    store.ensure_repo("alpha")
    head = store.enqueue("alpha").run.id
    store.enqueue("alpha")
    other = Store(postgres_url)
    try:
        with other.engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT id FROM runs WHERE id = :id FOR NO KEY UPDATE"), {"id": head})
            assert store.claim_next("w", max_concurrency=10, lease_s=60) is None
        again = store.claim_next("w2", max_concurrency=10, lease_s=60)
        assert again is not None and again.id == head
    finally:
        other.close()
        store.close()


def test_a_the_cap_holds_across_replicas(database_url: str, store: Store) -> None:
    """Two stores (replicas) with a cap of 2 claim exactly 2 runs between them."""
    _enqueue(store, 2)
    replica = Store(database_url)
    try:
        taken = [
            s.claim_next(f"r{i}", max_concurrency=2, lease_s=60)
            for i, s in enumerate((store, replica, store, replica))
        ]
        claimed = [r for r in taken if r is not None]
        assert len(claimed) == 2 and len({r.repo_id for r in claimed}) == 2
        store.finish(claimed[0].id, claimed[0].owner or "", claimed[0].attempt, "succeeded")
        assert replica.claim_next("r1", max_concurrency=2, lease_s=60) is not None
        assert replica.claim_next("r1", max_concurrency=2, lease_s=60) is None
    finally:
        replica.close()


@pytest.mark.postgres
def test_a_the_database_refuses_two_busy_runs_in_one_slot(postgres_url: str) -> None:
    """uq_runs_busy_slot rejects a second busy run in a slot, whoever writes it."""
    store = Store(postgres_url)
    store.upgrade()
    for name in ("alpha", "beta"):
        store.ensure_repo(name)
        store.enqueue(name)
    try:
        first = store.claim_next("w", max_concurrency=1, lease_s=60)
        assert first is not None
        assert store.claim_next("w", max_concurrency=1, lease_s=60) is None
        with pytest.raises(IntegrityError), store.engine.begin() as conn:
            conn.execute(
                update(RunRow)
                .where(RunRow.id != first.id)
                .values(state="preparing", slot=0, owner="intruder")
            )
    finally:
        store.close()


@pytest.mark.postgres
def test_a_parallel_replicas_never_break_the_rules(postgres_url: str) -> None:
    """3 replicas x 3 threads: each run is executed once, never two per repo or over the cap."""
    store = Store(postgres_url)
    store.upgrade()
    repos = [f"r{i}" for i in range(12)]
    for name in repos:
        store.ensure_repo(name)
    for i in range(240):
        store.enqueue(repos[i % len(repos)])
    replicas = [Store(postgres_url) for _ in range(3)]
    executed: list[int] = []

    def worker(replica: Store, name: str) -> None:
        while True:
            run = replica.claim_next(name, max_concurrency=5, lease_s=60)
            if run is None:
                if replica.queue_depth() == 0:
                    return
                continue
            executed.append(run.id)  # what this worker actually ran, not the claim's events
            replica.finish(run.id, name, run.attempt, "succeeded")

    threads = [
        threading.Thread(target=worker, args=(r, f"rep{i}/{t}"))
        for i, r in enumerate(replicas)
        for t in range(3)
    ]
    try:
        with InvariantMonitor(postgres_url, 5, interval_s=0.005) as monitor:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert len(executed) == 240 and len(set(executed)) == 240
        assert monitor.seen.violations == [] and monitor.seen.max_busy <= 5
    finally:
        for replica in replicas:
            replica.close()
        store.close()


def test_c_an_idle_claim_and_sweep_take_no_write_lock(store: Store) -> None:
    """With nothing queued or expiring, claim and sweep only read (no BEGIN IMMEDIATE)."""
    with StatementLog(store.engine) as log:
        for _ in range(5):
            assert store.claim_next("w", max_concurrency=4, lease_s=60) is None
            assert store.sweep(max_recoveries=3).changed == 0
    assert log.writes == []


def _waiting_scheduler(store: Any) -> tuple[Scheduler, list[int]]:
    """A scheduler whose tick never comes: only a wake can make it claim."""
    settings = dataclasses.replace(SETTINGS, claim_interval_s=3600.0, sweep_interval_s=3600.0)
    started: list[int] = []

    def pipeline(ctx: RunContext) -> None:
        started.append(ctx.run.id)

    scheduler = Scheduler(store, pipeline, settings=settings, max_concurrency=2, owner="w")
    return scheduler, started


class CountingStore:
    """The store, with the claims the scheduler finished counted."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.claims_done = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def claim_next(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._store.claim_next(*args, **kwargs)
        finally:
            self.claims_done += 1


def _claimed_after_wake(store: Store, producer: Store) -> None:
    counting = CountingStore(store)
    scheduler, started = _waiting_scheduler(counting)
    scheduler.start()
    try:
        assert scheduler.queue_wake is not None and scheduler.queue_wake.wait_listening(60)
        wait_for(lambda: counting.claims_done >= 1)  # the first pass found nothing
        passes = counting.claims_done
        run_id = producer.enqueue("alpha").run.id
        wait_for(lambda: run_id in started, timeout_s=120)
        assert counting.claims_done > passes
    finally:
        scheduler.stop(5.0)


def test_b_an_enqueue_wakes_the_claimer(store: Store) -> None:
    """A run queued after the claimer went to sleep is claimed without waiting for its tick."""
    _claimed_after_wake(store, store)


@pytest.mark.postgres
def test_b_an_enqueue_on_another_replica_wakes_the_claimer(postgres_url: str) -> None:
    """On PostgreSQL a run queued through another replica wakes this one (LISTEN/NOTIFY)."""
    store, producer = Store(postgres_url), Store(postgres_url)
    store.upgrade()
    store.ensure_repo("alpha")
    try:
        _claimed_after_wake(store, producer)
    finally:
        producer.close()
        store.close()


def test_b_busy_states_are_the_triggers_states() -> None:
    """The wake triggers and the slot index name the same busy states as the models."""
    from pipeline.store import wake

    assert wake._BUSY == "(" + ", ".join(f"'{s}'" for s in BUSY_STATES) + ")"
