"""Queue verbs of the store on SQLite and PostgreSQL: enqueue, claim, fencing, sweep, cancel."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from pipeline.core.errors import LeaseLost
from pipeline.run.recovery import FIX_FORWARD_PRIORITY
from pipeline.store import (
    EnqueueOptions,
    QueueFull,
    RunNotRetryable,
    SeenIssue,
    Store,
    UnknownRepo,
    UnknownRun,
)

LEASE_S = 30.0


@pytest.fixture
def store(store: Store) -> Store:
    """The shared store with alpha and beta enrolled."""
    store.ensure_repo("alpha")
    store.ensure_repo("beta")
    return store


def _issue(store: Store, number: int, repo: str = "alpha") -> int:
    return store.upsert_issue(
        repo,
        SeenIssue(
            tracker="local",
            number=number,
            title=f"issue {number}",
            author="alice",
            url=f"local://{number}",
        ),
    ).id


def _claim(store: Store, owner: str = "w1", cap: int = 10, lease_s: float = LEASE_S) -> int:
    run = store.claim_next(owner, max_concurrency=cap, lease_s=lease_s)
    assert run is not None
    return run.id


def test_enqueue_dedupes_active_runs_of_an_issue(store: Store) -> None:
    """Labelling an issue twice enqueues once and returns the existing run."""
    issue = _issue(store, 1)
    first = store.enqueue("alpha", EnqueueOptions(issue_id=issue))
    second = store.enqueue("alpha", EnqueueOptions(issue_id=issue))
    assert first.created and not second.created
    assert second.run.id == first.run.id
    assert [e.kind for e in store.run_events(first.run.id)] == ["queued"]


def test_enqueue_dedupe_is_race_safe(store: Store) -> None:
    """Eight threads enqueueing one issue at once create exactly one run."""
    issue = _issue(store, 2)
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def go() -> None:
        barrier.wait()
        results.append(store.enqueue("alpha", EnqueueOptions(issue_id=issue)).created)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]


def test_enqueue_refuses_unknown_repo_and_full_queue(store: Store) -> None:
    """An unenrolled repo and a full queue are refused with the reason."""
    with pytest.raises(UnknownRepo, match="nowhere"):
        store.enqueue("nowhere")
    store.enqueue("alpha", EnqueueOptions(max_queue_depth=2))
    store.enqueue("alpha", EnqueueOptions(max_queue_depth=2))
    with pytest.raises(QueueFull) as caught:
        store.enqueue("alpha", EnqueueOptions(max_queue_depth=2))
    assert (caught.value.depth, caught.value.limit) == (2, 2)
    assert caught.value.retry_after_s > 0 and "max_queue_depth" in str(caught.value)


def test_claim_order_is_priority_then_age_and_fix_forward_first(store: Store) -> None:
    """Claims take higher priority first, then the oldest; fix-forwards go first."""
    broken = store.enqueue("alpha").run.id  # its deploy broke: it ended, queuing its fix
    store.finish(_claim(store), "w1", 1, "failed", error_class="deploy_broken", error="fixing")
    low = store.enqueue("alpha").run.id
    high = store.enqueue("alpha", EnqueueOptions(priority=5)).run.id
    fix = store.enqueue(
        "alpha",
        EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY, parent_id=broken),
    ).run
    assert fix.priority >= FIX_FORWARD_PRIORITY
    order = []
    for _ in range(3):
        run_id = _claim(store)
        order.append(run_id)
        store.finish(run_id, "w1", 1, "succeeded")
    assert order == [fix.id, high, low]


def test_claim_is_serial_per_repo_and_capped(store: Store) -> None:
    """A repo with a busy run and the global cap both stop claims."""
    store.ensure_repo("gamma")
    for repo in ("alpha", "alpha", "beta", "gamma"):
        store.enqueue(repo)
    claimed = {_claim(store, cap=2), _claim(store, cap=2)}
    assert store.claim_next("w1", max_concurrency=2, lease_s=LEASE_S) is None
    assert store.active_count() == 2
    third = store.claim_next("w1", max_concurrency=3, lease_s=LEASE_S)
    assert third is not None and third.repo_name == "gamma"
    assert store.claim_next("w1", max_concurrency=10, lease_s=LEASE_S) is None
    assert len(claimed) == 2 and store.queue_depth() == 1


def test_claim_skips_frozen_excluded_and_not_yet_due(store: Store) -> None:
    """Frozen repos, excluded repos and runs before their run_after are not claimed."""
    store.enqueue("alpha")
    beta = store.enqueue("beta", EnqueueOptions(run_after_s=3600)).run
    store.freeze_repo("alpha", "broken deploy", by="test")
    assert store.claim_next("w1", max_concurrency=5, lease_s=LEASE_S) is None
    store.unfreeze_repo("alpha", "fixed", by="test")
    alpha_id = store.get_repo("alpha").id  # type: ignore[union-attr]
    assert (
        store.claim_next("w1", max_concurrency=5, lease_s=LEASE_S, exclude_repo_ids=[alpha_id])
        is None
    )
    assert _claim(store) != beta.id


def test_claim_sets_lease_attempt_and_deadline_from_claim(store: Store) -> None:
    """A claim records owner, attempt, lease and a deadline counted from the claim."""
    store.enqueue("alpha", EnqueueOptions(timeout_s=120))
    run = store.claim_next("w1", max_concurrency=5, lease_s=LEASE_S)
    assert run is not None and run.state == "preparing" and run.owner == "w1"
    assert run.attempt == 1 and run.started_at is not None and run.lease_until is not None
    assert run.deadline_at == run.started_at + timedelta(seconds=120)
    assert [e.kind for e in store.run_events(run.id)] == ["queued", "claimed"]


def test_writes_are_fenced_on_owner_and_attempt(store: Store) -> None:
    """Writes by a wrong owner or an old attempt raise LeaseLost and change nothing."""
    run_id = store.enqueue("alpha").run.id
    _claim(store)
    for owner, attempt in (("w2", 1), ("w1", 2)):
        with pytest.raises(LeaseLost):
            store.transition(run_id, owner, attempt, "implementing")
        with pytest.raises(LeaseLost):
            store.append_event_fenced(run_id, owner, attempt, "log", "nope")
        with pytest.raises(LeaseLost):
            store.finish(run_id, owner, attempt, "succeeded")
        assert not store.heartbeat(run_id, owner, attempt, LEASE_S).alive
    run = store.transition(run_id, "w1", 1, "implementing", "agent at work", branch="b")
    assert (run.state, run.branch) == ("implementing", "b")
    store.update_run(run_id, "w1", 1, head_sha="abc", tokens_in=5, cost_usd=0.25)
    with pytest.raises(ValueError, match="lease_until"):
        store.update_run(run_id, "w1", 1, lease_until=None)
    with pytest.raises(ValueError, match="terminal"):
        store.finish(run_id, "w1", 1, "implementing")
    done = store.finish(run_id, "w1", 1, "succeeded", summary="ok")
    assert (done.state, done.owner, done.lease_until) == ("succeeded", None, None)
    assert done.summary == "ok"
    with pytest.raises(LeaseLost):
        store.append_event_fenced(run_id, "w1", 1, "log", "after the end")


def test_schedule_retry_backs_off_then_fails_when_attempts_are_used(store: Store) -> None:
    """Retryable failures go to retry_wait until max_attempts, then the run fails."""
    run_id = store.enqueue("alpha", EnqueueOptions(max_attempts=2)).run.id
    _claim(store)
    run = store.schedule_retry(run_id, "w1", 1, delay_s=0, error_class="network", error="reset")
    assert (run.state, run.failures, run.owner) == ("retry_wait", 1, None)
    assert store.sweep(max_recoveries=3).requeued == [run_id]
    _claim(store)
    run = store.schedule_retry(run_id, "w1", 2, delay_s=0, error_class="network", error="reset")
    assert (run.state, run.failures, run.error_class) == ("failed", 2, "network")
    assert run.finished_at is not None


def test_retry_wait_respects_run_after(store: Store) -> None:
    """A run in retry_wait is not requeued before its run_after."""
    run_id = store.enqueue("alpha").run.id
    _claim(store)
    store.schedule_retry(run_id, "w1", 1, delay_s=3600, error_class="x", error="later")
    assert store.sweep(max_recoveries=3).requeued == []
    assert store.get_run(run_id).state == "retry_wait"  # type: ignore[union-attr]


def test_sweep_recovers_expired_lease_back_into_the_queue(store: Store) -> None:
    """An expired lease goes to retry_wait and, in the same sweep, back to queued."""
    run_id = store.enqueue("alpha").run.id
    _claim(store, lease_s=-1)
    report = store.sweep(max_recoveries=3)
    assert report.recovered == [run_id] and report.requeued == [run_id]
    run = store.get_run(run_id)
    assert run is not None and (run.state, run.recoveries, run.failures) == ("queued", 1, 0)
    assert not store.heartbeat(run_id, "w1", 1, LEASE_S).alive
    assert store.claim_next("w2", max_concurrency=5, lease_s=LEASE_S).attempt == 2  # type: ignore[union-attr]


def test_a_fix_forward_waits_for_its_broken_run_recovered_after_a_crash(store: Store) -> None:
    """Killed between queuing its fix-forward and its own ending, the broken run is swept
    back into the queue beside it: the broken run is claimed first, the fix-forward only
    once the broken run has ended (whatever their priorities)."""
    broken = store.enqueue("alpha", EnqueueOptions(issue_id=_issue(store, 1))).run.id
    _claim(store, lease_s=-1)  # its worker dies while watching
    fix = store.enqueue(
        "alpha",
        EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY, parent_id=broken),
    ).run.id
    assert store.sweep(max_recoveries=3).requeued == [broken]
    again = store.claim_next("w2", max_concurrency=5, lease_s=LEASE_S)
    assert again is not None and again.id == broken
    store.finish(broken, "w2", 2, "failed", error_class="deploy_broken", error="fixing")
    taken = store.claim_next("w2", max_concurrency=5, lease_s=LEASE_S)
    assert taken is not None and taken.id == fix


def test_sweep_ends_cancelled_overdue_and_exhausted_runs(store: Store) -> None:
    """Expired leases end cancelled if asked, failed on timeout, failed after max recoveries."""
    store.ensure_repo("gamma")
    cancelled = store.enqueue("alpha").run.id
    overdue = store.enqueue("beta", EnqueueOptions(timeout_s=0.0)).run.id
    exhausted = store.enqueue("gamma").run.id
    for _ in range(3):
        store.claim_next("w1", max_concurrency=5, lease_s=-1)
    store.cancel_run(cancelled, by="alice")
    report = store.sweep(max_recoveries=0)
    assert (report.cancelled, report.timed_out, report.failed) == (
        [cancelled],
        [overdue],
        [exhausted],
    )
    states = {i: store.get_run(i).state for i in (cancelled, overdue, exhausted)}  # type: ignore[union-attr]
    assert set(states.values()) == {"cancelled", "failed"}
    assert store.get_run(overdue).error_class == "timeout"  # type: ignore[union-attr]


def test_sweep_leaves_live_leases_alone(store: Store) -> None:
    """A renewed lease is not touched by the sweeper."""
    run_id = store.enqueue("alpha").run.id
    _claim(store)
    assert store.heartbeat(run_id, "w1", 1, LEASE_S).alive
    assert store.sweep(max_recoveries=3).changed == 0


def test_cancel_waiting_busy_and_terminal_runs(store: Store) -> None:
    """Cancel ends a queued run at once, flags a busy one, leaves a terminal one."""
    queued = store.enqueue("beta").run.id
    busy = store.enqueue("alpha").run.id
    assert _claim(store) in (queued, busy)
    store.cancel_run(queued if store.get_run(queued).state == "queued" else busy, by="bob")  # type: ignore[union-attr]
    runs = {i: store.get_run(i) for i in (queued, busy)}
    busy_run = next(r for r in runs.values() if r is not None and r.owner == "w1")
    assert store.cancel_run(busy_run.id, by="bob").cancel_requested
    assert store.heartbeat(busy_run.id, "w1", 1, LEASE_S).cancel_requested
    waiting = next(r for r in runs.values() if r is not None and r.owner is None)
    assert store.get_run(waiting.id).state == "cancelled"  # type: ignore[union-attr]
    assert store.cancel_run(waiting.id, by="bob").state == "cancelled"
    with pytest.raises(UnknownRun):
        store.cancel_run(99999, by="bob")


def test_retry_run_queues_a_new_run_for_ended_runs_only(store: Store) -> None:
    """retry_run makes a new run like a failed one; a live run cannot be retried."""
    issue = _issue(store, 3)
    run_id = store.enqueue("alpha", EnqueueOptions(issue_id=issue, priority=2, timeout_s=60)).run.id
    with pytest.raises(RunNotRetryable, match="queued"):
        store.retry_run(run_id, by="carol")
    _claim(store)
    store.finish(run_id, "w1", 1, "failed", error_class="fatal", error="bad config")
    again = store.retry_run(run_id, by="carol")
    assert again.created and again.run.id != run_id
    assert (again.run.issue_id, again.run.priority, again.run.timeout_s) == (issue, 2, 60)
    assert not store.retry_run(run_id, by="carol").created
    assert any(e.kind == "retry" for e in store.run_events(run_id))


def test_retry_of_a_blocked_run_answers_it_as_relabelling_does(store: Store) -> None:
    """`runs retry` of a run the agent's question escalated links the new run to it, so the
    new run resumes that session with the replies (as re-adding the label does); a retry of
    any other ending starts afresh."""
    from pipeline.run.resume import answered_run

    blocked = store.enqueue("alpha", EnqueueOptions(issue_id=_issue(store, 4))).run.id
    failed = store.enqueue("beta", EnqueueOptions(issue_id=_issue(store, 5, "beta"))).run.id
    _claim(store)
    _claim(store)
    store.finish(blocked, "w1", 1, "escalated", error_class="blocked", error="which port?")
    store.finish(failed, "w1", 1, "failed", error_class="fatal", error="bad config")
    answering = store.retry_run(blocked, by="carol").run
    assert answering.parent_id == blocked
    found = answered_run(store, answering)
    assert found is not None and found.id == blocked
    afresh = store.retry_run(failed, by="carol").run
    assert afresh.parent_id is None and answered_run(store, afresh) is None


def test_retry_of_a_run_that_pushed_carries_its_commit(store: Store) -> None:
    """A retried run that had pushed starts with that commit: it watches, never pushes again."""
    pushed = store.enqueue("alpha", EnqueueOptions(issue_id=_issue(store, 4))).run.id
    assert _claim(store) == pushed
    store.update_run(pushed, "w1", 1, base_sha="b" * 40, pushed_sha="a" * 40)
    store.finish(pushed, "w1", 1, "escalated", error_class="deploy_inconclusive", error="no CI")
    unpushed = store.enqueue("beta", EnqueueOptions(issue_id=_issue(store, 5, "beta"))).run.id
    assert _claim(store) == unpushed
    store.update_run(unpushed, "w1", 1, base_sha="c" * 40)
    store.finish(unpushed, "w1", 1, "failed", error_class="fatal", error="bad config")
    again = store.retry_run(pushed, by="carol").run
    assert (again.pushed_sha, again.base_sha) == ("a" * 40, "b" * 40)
    fresh = store.retry_run(unpushed, by="carol").run
    assert (fresh.pushed_sha, fresh.base_sha) == (None, None)


def test_cost_and_counts(store: Store) -> None:
    """repo_cost_since sums the repo's cost; counts follow the states."""
    run_id = store.enqueue("alpha").run.id
    store.enqueue("alpha")
    _claim(store)
    store.update_run(run_id, "w1", 1, cost_usd=1.5)
    repo_id = store.get_repo("alpha").id  # type: ignore[union-attr]
    since = store.now() - timedelta(hours=1)
    assert store.repo_cost_since(repo_id, since) == pytest.approx(1.5)
    assert store.repo_cost_since(repo_id, store.now() + timedelta(hours=1)) == 0.0
    assert (store.active_count(), store.queue_depth()) == (1, 1)


def _ended(store: Store, run_id: int, state: str, pushed: str | None = None) -> None:
    taken = store.claim_next("w9", max_concurrency=5, lease_s=LEASE_S)
    assert taken is not None and taken.id == run_id
    if pushed:
        store.update_run(run_id, "w9", taken.attempt, pushed_sha=pushed)
    store.finish(run_id, "w9", taken.attempt, state, error_class="deploy_broken", error="x")


def test_a_new_run_of_an_issue_continues_a_pushed_run_only_while_unhealed(store: Store) -> None:
    """The ready label again (or the API) carries the pushed commit of the issue's latest
    run when that run did not succeed and no fix-forward of it healed the deploy."""
    from pipeline.store.pushed import pushed_run

    issue = _issue(store, 1)
    assert pushed_run(store, issue) is None  # no run yet
    first = store.enqueue("alpha", EnqueueOptions(issue_id=issue)).run.id
    _ended(store, first, "escalated")
    assert pushed_run(store, issue) is None  # it never pushed: a new implementation
    broken = store.enqueue("alpha", EnqueueOptions(issue_id=issue)).run.id
    _ended(store, broken, "failed", pushed="c" * 40)
    found = pushed_run(store, issue)
    assert found is not None and found.id == broken
    fix = store.enqueue(
        "alpha", EnqueueOptions(kind="fix_forward", priority=100, parent_id=broken)
    ).run.id
    _ended(store, fix, "failed", pushed="d" * 40)  # the chain goes on: still broken
    assert pushed_run(store, issue) is not None
    healer = store.enqueue("alpha", EnqueueOptions(kind="fix_forward", parent_id=fix)).run.id
    _ended(store, healer, "succeeded", pushed="e" * 40)
    assert pushed_run(store, issue) is None  # healed: the issue was closed as done
    done = store.enqueue("alpha", EnqueueOptions(issue_id=issue)).run.id
    _ended(store, done, "succeeded", pushed="f" * 40)
    assert pushed_run(store, issue) is None
