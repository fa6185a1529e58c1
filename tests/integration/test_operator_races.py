"""An operator's writes racing another replica's daemon on one PostgreSQL database.

SQLite serialises every write transaction (``BEGIN IMMEDIATE``); on PostgreSQL a
verb's read and its write may straddle another replica's commit, so these tests
put that commit exactly between the two.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

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


def _waiting_on_a_lock(store: Store) -> bool:
    """True while some session of this database waits for a row lock."""
    with store.engine.connect() as conn:
        waiting = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    return bool(waiting)


def test_an_operators_label_and_the_daemons_label_swap_both_stay(
    replicas: tuple[Store, Store],
) -> None:
    """`pipeline issue label` racing the daemon's own label change on the same local issue
    keeps both: the operator's ready label is not written over (nor the daemon's)."""
    operator, daemon = replicas
    issue = operator.add_local_issue("alpha", "t", "", author="alice", labels=("agent-working",))
    swap = threading.Thread(
        target=lambda: daemon.change_local_labels(issue.id, remove=("agent-working",))
    )

    def daemon_meanwhile() -> object:
        swap.start()  # it either finishes (nothing held it) or waits for the operator's lock
        while swap.is_alive() and not _waiting_on_a_lock(daemon):
            time.sleep(0.01)
        return True

    with _just_before(operator, "UPDATE LOCAL_ISSUES", daemon_meanwhile):
        said = operator.change_local_labels(issue.id, add=("ready-for-agent",), by="alice")
    swap.join()
    assert "ready-for-agent" in said.labels
    final = operator.get_local_issue(issue.id)
    assert final is not None and final.labels == ("ready-for-agent",)
