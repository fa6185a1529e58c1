"""An operator's writes racing another replica's daemon on one PostgreSQL database.

SQLite serialises every write transaction (``BEGIN IMMEDIATE``); on PostgreSQL a
verb's read and its write may straddle another replica's commit, so these tests
put that commit exactly between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from pipeline.store import Store

pytestmark = pytest.mark.postgres

LEASE_S = 30.0


@pytest.fixture
def replicas(postgres_url: str) -> Iterator[tuple[Store, Store]]:
    """Two stores on one database: the operator's command and the other replica's daemon."""
    operator, daemon = Store(postgres_url), Store(postgres_url)
    operator.upgrade()
    operator.ensure_repo("alpha")
    try:
        yield operator, daemon
    finally:
        operator.close()
        daemon.close()


@contextmanager
def _just_before(store: Store, prefix: str, act: Callable[[], object]) -> Iterator[list[object]]:
    """Run ``act`` (on another store) once, just before ``store`` sends a ``prefix`` statement."""
    done: list[object] = []

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not done and statement.lstrip().upper().startswith(prefix):
            done.append(act())

    event.listen(store.engine, "before_cursor_execute", hook)
    try:
        yield done
    finally:
        event.remove(store.engine, "before_cursor_execute", hook)


def test_cancel_of_a_queued_run_claimed_meanwhile_stops_it_instead(
    replicas: tuple[Store, Store],
) -> None:
    """A cancel that read the run queued, while another replica claimed it, flags the claimed
    run for its worker: it never marks a run cancelled that a worker holds (the repo would look
    idle and a second agent could start in it)."""
    operator, daemon = replicas
    run_id = operator.enqueue("alpha").run.id
    following = operator.enqueue("alpha").run.id
    claim = lambda: daemon.claim_next("replica-b", max_concurrency=4, lease_s=LEASE_S)  # noqa: E731
    with _just_before(operator, "UPDATE RUNS", claim) as claims:
        after = operator.cancel_run(run_id, by="alice")
    assert [getattr(c, "id", None) for c in claims] == [run_id]
    assert (after.state, after.owner, after.cancel_requested) == ("preparing", "replica-b", True)
    beat = daemon.heartbeat(run_id, "replica-b", after.attempt, LEASE_S)
    assert beat.alive and beat.cancel_requested
    assert daemon.claim_next("replica-c", max_concurrency=4, lease_s=LEASE_S) is None
    assert operator.get_run(following).state == "queued"  # type: ignore[union-attr]
    kinds = [e.kind for e in operator.run_events(run_id)]
    assert kinds[-1] == "cancel" and "state" not in kinds[kinds.index("claimed") :]


def test_cancel_of_a_busy_run_swept_back_to_the_queue_meanwhile_ends_it(
    replicas: tuple[Store, Store],
) -> None:
    """A cancel that read the run busy, while another replica's sweeper put it back in the
    queue (its owner died), ends it cancelled at once: it is not left queued with a flag
    that only a worker, after its retry delay, would read."""
    operator, daemon = replicas
    run_id = operator.enqueue("alpha").run.id
    assert daemon.claim_next("dead-replica", max_concurrency=4, lease_s=-1) is not None
    sweep = lambda: daemon.sweep(max_recoveries=3)  # noqa: E731
    with _just_before(operator, "UPDATE RUNS", sweep) as sweeps:
        after = operator.cancel_run(run_id, by="alice")
    assert [getattr(s, "recovered", None) for s in sweeps] == [[run_id]]
    assert (after.state, after.owner) == ("cancelled", None)
    assert daemon.claim_next("replica-b", max_concurrency=4, lease_s=LEASE_S) is None
