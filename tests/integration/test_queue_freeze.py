"""An unhealed fix-forward freezes its repo in the write that ends it, on SQLite and PostgreSQL.

The attacker is a second claimer (another replica) that looks at the queue the moment
the fix-forward's ending is written, before any after-hook of the scheduler has run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from pipeline.core.errors import FatalError, RetryableError
from pipeline.core.states import FIX_FORWARD_PRIORITY, Outcome, RunState
from pipeline.queue.scheduler import RunContext, Scheduler
from pipeline.run.recovery import unhealed_freeze
from pipeline.store import EnqueueOptions, Run, Store
from tests.integration.test_queue import SETTINGS as QUEUE_SETTINGS
from tests.integration.test_queue import WAIT_S

SETTINGS = replace(QUEUE_SETTINGS, lease_s=5.0)


def _crash(ctx: RunContext) -> Outcome:
    return Outcome(RunState.FAILED, "agent_crash", "the agent crashed")


def _fatal(ctx: RunContext) -> None:
    raise FatalError("bad_config", "the test command is missing")


def _flaky(ctx: RunContext) -> None:
    raise RetryableError("network", "the forge did not answer")


def _cancelled(ctx: RunContext) -> Outcome:
    return Outcome(RunState.CANCELLED, "cancelled", "cancelled while running")


@pytest.fixture
def store(store: Store) -> Store:
    store.ensure_repo("alpha")
    return store


@pytest.fixture
def rival_at_settle(store: Store) -> Iterator[Callable[..., dict[str, Any]]]:
    """Run one fix-forward on a scheduler whose ``on_settled`` first lets a rival claim."""
    made: list[Scheduler] = []

    def run(pipeline: Callable[[RunContext], Any]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        settled = threading.Event()

        def on_settled(ended: Run) -> None:
            seen["rival"] = store.claim_next("rival", max_concurrency=5, lease_s=30)
            seen["repo"] = store.get_repo("alpha")
            seen["ended"] = ended
            settled.set()

        scheduler = Scheduler(store, pipeline, settings=SETTINGS, max_concurrency=1, owner="w1")
        scheduler.freeze_policy = unhealed_freeze
        scheduler.on_settled = on_settled
        made.append(scheduler)
        scheduler.start()
        assert settled.wait(WAIT_S)
        return seen

    yield run
    for scheduler in made:
        scheduler.stop(0.0)


def _broken_deploy_then_queue(store: Store) -> tuple[Run, Run]:
    """A run whose deploy broke, its fix-forward first in line, and an issue run behind it."""
    parent = store.enqueue("alpha").run
    claimed = store.claim_next("w0", max_concurrency=5, lease_s=30)
    assert claimed is not None and claimed.id == parent.id
    store.finish(parent.id, "w0", 1, "failed", error_class="deploy_broken", error="broken")
    options = EnqueueOptions(
        kind="fix_forward", priority=FIX_FORWARD_PRIORITY, parent_id=parent.id, max_attempts=1
    )
    return store.enqueue("alpha", options).run, store.enqueue("alpha").run


@pytest.mark.parametrize(
    ("pipeline", "state", "error_class"),
    [
        (_crash, "failed", "agent_crash"),
        (_fatal, "failed", "bad_config"),
        (_flaky, "failed", "network"),  # its one attempt used up: schedule_retry ends it
        (_cancelled, "cancelled", "cancelled"),
    ],
)
def test_no_claim_sees_an_unhealed_fix_forward_ended_and_its_repo_open(
    store: Store,
    rival_at_settle: Callable[..., dict[str, Any]],
    pipeline: Callable[[RunContext], Any],
    state: str,
    error_class: str,
) -> None:
    """A rival claiming the moment the fix-forward's ending is written gets nothing: the
    repo is frozen already, with the reason and escalation the after-hook used to write."""
    fix, queued = _broken_deploy_then_queue(store)
    seen = rival_at_settle(pipeline)
    assert seen["rival"] is None
    ended = seen["ended"]
    assert (ended.id, ended.state, ended.error_class) == (fix.id, state, error_class)
    repo = seen["repo"]
    reason = f"fix-forward run {fix.id} ended {state} ({error_class})"
    assert repo.frozen and repo.frozen_run_id == fix.id
    assert (repo.frozen_by, repo.frozen_reason) == ("afk-pipeline", reason)
    escalations = store.list_escalations("alpha")
    assert [(e.reason, e.run_id) for e in escalations] == [("frozen", fix.id)]
    assert escalations[0].detail == f"{reason}: {ended.error}"
    assert store.get_run(queued.id).state == "queued"  # type: ignore[union-attr]


def test_a_chained_fix_forward_leaves_the_repo_open(
    store: Store, rival_at_settle: Callable[..., dict[str, Any]]
) -> None:
    """A fix-forward that failed ``deploy_broken`` queued the next one: nothing is frozen."""
    fix, queued = _broken_deploy_then_queue(store)
    seen = rival_at_settle(lambda ctx: Outcome(RunState.FAILED, "deploy_broken", "still broken"))
    assert seen["ended"].id == fix.id
    assert seen["rival"] is not None and seen["rival"].id == queued.id
    assert not seen["repo"].frozen and store.list_escalations("alpha") == []


def test_the_sweeper_ending_a_fix_forward_freezes_its_repo_in_the_same_write(
    store: Store,
) -> None:
    """A fix-forward whose worker died, ended by the scheduler's sweep (recoveries used
    up), leaves its repo frozen in that write: the next claim gets nothing."""
    fix, queued = _broken_deploy_then_queue(store)
    dead = store.claim_next("dead", max_concurrency=5, lease_s=-1)
    assert dead is not None and dead.id == fix.id
    settings = replace(SETTINGS, max_recoveries=0)
    scheduler = Scheduler(store, lambda ctx: None, settings=settings, max_concurrency=1)
    scheduler.freeze_policy = unhealed_freeze
    assert scheduler.sweep_once().failed == [fix.id]
    assert store.claim_next("rival", max_concurrency=5, lease_s=30) is None
    repo = store.get_repo("alpha")
    assert repo is not None and repo.frozen and repo.frozen_run_id == fix.id
    assert repo.frozen_reason == f"fix-forward run {fix.id} ended failed (lease_expired)"
    assert [e.reason for e in store.list_escalations("alpha")] == ["frozen"]
    assert store.get_run(queued.id).state == "queued"  # type: ignore[union-attr]
