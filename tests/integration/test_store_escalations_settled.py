"""A later run's success settles the escalations of its issue's earlier runs (ADR 36).

On SQLite and PostgreSQL: the success and the acknowledgement are one transaction; an
escalation recorded after the success (an ending told late, after a crash) is settled as
it is written; other issues, issue-less runs and a repo's current freeze keep theirs.
"""

from __future__ import annotations

import pytest

from pipeline.store import EnqueueOptions, Store
from pipeline.store.issues import SeenIssue

LEASE_S = 30.0


@pytest.fixture
def store(store: Store) -> Store:
    store.ensure_repo("alpha")
    return store


def _issue(store: Store, number: int) -> int:
    seen = SeenIssue("local", number, f"issue {number}", "alice", f"local://alpha/{number}")
    return store.upsert_issue("alpha", seen).id


def _claimed(store: Store, issue_id: int | None) -> int:
    run_id = store.enqueue("alpha", EnqueueOptions(issue_id=issue_id)).run.id
    claimed = store.claim_next("w1", max_concurrency=5, lease_s=LEASE_S)
    assert claimed is not None and claimed.id == run_id
    return run_id


def _ended(store: Store, issue_id: int | None, state: str) -> int:
    """A run of ``issue_id`` claimed and ended ``state``; its id."""
    run_id = _claimed(store, issue_id)
    store.finish(run_id, "w1", 1, state, error_class=None if state == "succeeded" else "x")
    return run_id


def _open(store: Store) -> list[int]:
    return [e.id for e in store.open_escalations()]


def _by(store: Store) -> dict[int, str | None]:
    return {e.id: e.acknowledged_by for e in store.open_escalations(include_acknowledged=True)}


def test_a_success_settles_its_issues_earlier_escalations_only(store: Store) -> None:
    issue, other = _issue(store, 1), _issue(store, 2)
    first = _ended(store, issue, "escalated")
    blocked = store.add_escalation("alpha", "blocked", "which colour?", first)
    elsewhere = store.add_escalation("alpha", "blocked", "?", _ended(store, other, "escalated"))
    budget = store.add_escalation("alpha", "daily_budget", "spent")
    assert _open(store) == [blocked, elsewhere, budget]
    second = _ended(store, issue, "succeeded")
    assert _open(store) == [elsewhere, budget]
    assert _by(store)[blocked] == f"afk-pipeline: settled by run {second}, which succeeded"
    said = [e.message for e in store.run_events(first) if e.kind == "escalation"]
    assert said == [f"escalation {blocked} (blocked) settled by run {second}, which succeeded"]


def test_an_escalation_told_after_the_success_is_settled_as_it_is_written(
    store: Store,
) -> None:
    issue = _issue(store, 1)
    failed = _ended(store, issue, "failed")
    succeeded = _ended(store, issue, "succeeded")
    late = store.add_escalation("alpha", "x", "told late", failed, once=f"escalation:run={failed}")
    assert late is not None and _open(store) == []
    assert _by(store)[late] == f"afk-pipeline: settled by run {succeeded}, which succeeded"
    # a later run's own escalation is not settled by an earlier success
    third = _ended(store, issue, "escalated")
    newer = store.add_escalation("alpha", "blocked", "again?", third)
    assert _open(store) == [newer]


def test_runs_without_an_issue_settle_nothing(store: Store) -> None:
    lone = _ended(store, None, "failed")
    escalation = store.add_escalation("alpha", "x", "no issue", lone)
    _ended(store, None, "succeeded")
    assert _open(store) == [escalation]


def test_a_current_freeze_is_left_to_the_unfreeze(store: Store) -> None:
    """The escalations of the run that froze the repo stay open, even when a run of its
    issue succeeds while the repo is frozen: only the unfreeze acknowledges them."""
    issue = _issue(store, 1)
    froze = _ended(store, issue, "escalated")
    stuck = store.add_escalation("alpha", "x", "stuck", froze)
    running = _claimed(store, issue)
    store.freeze_repo("alpha", "stuck", "afk-pipeline", run_id=froze, escalation="frozen")
    store.finish(running, "w1", 1, "succeeded")
    assert [(e.id, e.of_freeze) for e in store.open_escalations()][:1] == [(stuck, True)]
    assert [e.reason for e in store.open_escalations()] == ["x", "frozen"]
    assert store.unfreeze_repo("alpha", "fixed by hand", "carol")
    assert _open(store) == [] and _by(store)[stuck] == "carol: fixed by hand"


def test_a_repo_a_person_froze_still_settles_its_issues(store: Store) -> None:
    """A person's freeze (no run) is its own escalation; the issue's earlier ones settle."""
    issue = _issue(store, 1)
    blocked = store.add_escalation("alpha", "blocked", "?", _ended(store, issue, "escalated"))
    running = _claimed(store, issue)
    store.freeze_repo("alpha", "careful", "carol", escalation="frozen by carol")
    store.finish(running, "w1", 1, "succeeded")
    assert [(e.reason, e.run_id) for e in store.open_escalations()] == [("frozen", None)]
    assert _by(store)[blocked] == f"afk-pipeline: settled by run {running}, which succeeded"
