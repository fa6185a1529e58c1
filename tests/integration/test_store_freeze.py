"""A run's ending and its repo's freeze in one transaction, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from pipeline.core.errors import LeaseLost
from pipeline.store import EnqueueOptions, RepoFreeze, Store

LEASE_S = 30.0
FREEZE = RepoFreeze("fix-forward run ended failed (agent_crash)", "afk-pipeline", "look at it")


@pytest.fixture
def store(store: Store) -> Store:
    """The shared store with alpha enrolled."""
    store.ensure_repo("alpha")
    return store


def _claimed(store: Store, max_attempts: int = 3) -> int:
    run_id = store.enqueue("alpha", EnqueueOptions(max_attempts=max_attempts)).run.id
    claimed = store.claim_next("w1", max_concurrency=5, lease_s=LEASE_S)
    assert claimed is not None and claimed.id == run_id
    return run_id


def test_a_finish_with_a_freeze_ends_the_run_and_freezes_its_repo(store: Store) -> None:
    """The run is terminal, the repo frozen with reason, by and run, one escalation, and the
    freeze is on the run's timeline after its ending."""
    run_id = _claimed(store)
    store.enqueue("alpha")
    run = store.finish(run_id, "w1", 1, "failed", error_class="crash", error="x", freeze=FREEZE)
    assert (run.state, run.owner, run.error_class) == ("failed", None, "crash")
    repo = store.get_repo("alpha")
    assert repo is not None and repo.frozen
    assert (repo.frozen_reason, repo.frozen_by, repo.frozen_run_id) == (
        FREEZE.reason,
        "afk-pipeline",
        run_id,
    )
    escalations = store.list_escalations("alpha")
    assert [(e.reason, e.detail, e.run_id) for e in escalations] == [
        ("frozen", "look at it", run_id)
    ]
    assert [e.kind for e in store.run_events(run_id)][-2:] == ["state", "repo"]
    assert store.claim_next("w2", max_concurrency=5, lease_s=LEASE_S) is None  # the queued one


def test_a_finish_that_lost_its_fence_freezes_nothing(store: Store) -> None:
    """LeaseLost: the run is not ended by us, and the repo stays open with no escalation."""
    run_id = _claimed(store)
    for owner, attempt in (("w2", 1), ("w1", 2)):
        with pytest.raises(LeaseLost):
            store.finish(run_id, owner, attempt, "failed", error_class="x", freeze=FREEZE)
        with pytest.raises(LeaseLost):
            store.schedule_retry(
                run_id, owner, attempt, delay_s=0, error_class="x", error="x", freeze=FREEZE
            )
    repo = store.get_repo("alpha")
    assert repo is not None and not repo.frozen
    assert store.list_escalations("alpha") == []
    assert store.get_run(run_id).state == "preparing"  # type: ignore[union-attr]


def test_a_finish_on_a_frozen_repo_keeps_the_first_freeze(store: Store) -> None:
    """A repo frozen already (by a human) keeps its freeze; no second escalation."""
    run_id = _claimed(store)
    assert store.freeze_repo("alpha", "manual brake", by="carol")
    store.finish(run_id, "w1", 1, "cancelled", error_class="cancelled", freeze=FREEZE)
    repo = store.get_repo("alpha")
    assert repo is not None and (repo.frozen_by, repo.frozen_run_id) == ("carol", None)
    assert store.list_escalations("alpha") == []


def test_a_retry_freezes_only_when_it_ends_the_run(store: Store) -> None:
    """A counted failure with attempts left freezes nothing; the one that uses them up does."""
    run_id = _claimed(store, max_attempts=2)
    run = store.schedule_retry(
        run_id, "w1", 1, delay_s=0, error_class="network", error="reset", freeze=FREEZE
    )
    assert run.state == "retry_wait" and not store.get_repo("alpha").frozen  # type: ignore[union-attr]
    store.sweep(max_recoveries=3)
    assert store.claim_next("w1", max_concurrency=5, lease_s=LEASE_S) is not None
    run = store.schedule_retry(
        run_id, "w1", 2, delay_s=0, error_class="network", error="reset", freeze=FREEZE
    )
    repo = store.get_repo("alpha")
    assert run.state == "failed" and repo is not None and repo.frozen_run_id == run_id
    assert [e.reason for e in store.list_escalations("alpha")] == ["frozen"]


def test_an_unfreeze_acknowledges_the_freezes_escalations_only(store: Store) -> None:
    """Unfreezing acknowledges the freeze's own escalation and those of the run that froze the
    repo; a blocked run's question and a refused token stay open for their humans."""
    blocked = store.enqueue("alpha").run.id
    store.cancel_run(blocked, by="alice")  # ended: the next run may be the fix-forward
    store.add_escalation("alpha", "blocked", "which colour?", blocked)
    store.add_escalation("alpha", "tracker_refused", "401 on the ready list")
    fix = store.enqueue("alpha", EnqueueOptions(kind="fix_forward")).run.id
    store.add_escalation("alpha", "frozen", "deploy still broken", fix)
    store.freeze_repo("alpha", "deploy still broken", by="afk-pipeline", run_id=fix)
    store.add_escalation("alpha", "failed", "fix-forward ended failed", fix)
    assert store.unfreeze_repo("alpha", "fixed by hand", by="alice")
    acknowledged = {e.reason: e.acknowledged_by for e in store.list_escalations("alpha")}
    assert acknowledged == {
        "blocked": None,
        "tracker_refused": None,
        "frozen": "alice: fixed by hand",
        "failed": "alice: fixed by hand",
    }

    store.freeze_repo("alpha", "looking", by="bob", escalation="frozen by bob: looking")
    assert store.unfreeze_repo("alpha", "done", by="bob")
    still_open = [e.reason for e in store.list_escalations("alpha") if e.acknowledged_at is None]
    assert sorted(still_open) == ["blocked", "tracker_refused"]
