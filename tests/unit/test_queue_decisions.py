"""What the scheduler starts, decided in one ``run_once`` on a SQLite store (no claim loop).

Each run's pipeline holds until the test releases it, so the slots a run takes stay taken
while the test looks at what ``run_once`` chose.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import SchedulerSettings
from pipeline.core.states import FIX_FORWARD_PRIORITY
from pipeline.queue.scheduler import RunContext, Scheduler
from pipeline.store import EnqueueOptions, Store
from pipeline.testing.databases import open_store

SETTINGS = SchedulerSettings(lease_s=30.0, heartbeat_s=5.0, kill_grace_s=0.5, cancel_check_s=5.0)


class Held:
    """A run pipeline that records which runs started and holds each until released."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.release = threading.Event()

    def __call__(self, ctx: RunContext) -> None:
        self.started.append(ctx.run.id)
        self.release.wait(30)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A SQLite store with repos alpha, beta and gamma."""
    with open_store(f"sqlite:///{tmp_path / 'q.db'}", repos=("alpha", "beta", "gamma")) as s:
        yield s


@pytest.fixture
def held() -> Iterator[Held]:
    """The holding pipeline, released when the test ends."""
    pipeline = Held()
    yield pipeline
    pipeline.release.set()


def scheduler(store: Store, held: Held, cap: int = 4, excluded: tuple[int, ...] = ()) -> Scheduler:
    built = Scheduler(store, held, settings=SETTINGS, max_concurrency=cap, owner="decider")
    built.excluded_repos = lambda: excluded
    return built


def test_one_run_per_repo_at_a_time(store: Store, held: Held) -> None:
    """With free slots, a repo's second run waits while its first runs; other repos start."""
    a1, a2 = store.enqueue("alpha").run.id, store.enqueue("alpha").run.id
    b1 = store.enqueue("beta").run.id
    decider = scheduler(store, held)
    assert decider.run_once() == 2
    assert decider.running == [a1, b1]
    assert store.get_run(a2).state == "queued"  # type: ignore[union-attr]
    held.release.set()
    decider.stop(5.0)


def test_the_global_cap_bounds_what_starts(store: Store, held: Held) -> None:
    """Three repos ready and a cap of two: the two oldest start, the third stays queued."""
    ids = [store.enqueue(repo).run.id for repo in ("alpha", "beta", "gamma")]
    decider = scheduler(store, held, cap=2)
    assert decider.run_once() == 2 and decider.run_once() == 0
    assert decider.running == ids[:2]
    held.release.set()
    decider.stop(5.0)


def test_excluded_repos_start_nothing(store: Store, held: Held) -> None:
    """A repo the exclusion names (over its budget) is skipped; the others still start."""
    store.enqueue("alpha")
    beta = store.enqueue("beta").run.id
    alpha_id = store.get_repo("alpha").id  # type: ignore[union-attr]
    decider = scheduler(store, held, excluded=(alpha_id,))
    assert decider.run_once() == 1 and decider.running == [beta]
    held.release.set()
    decider.stop(5.0)


def test_a_fix_forward_jumps_the_queue(store: Store, held: Held) -> None:
    """With one slot, a fix-forward queued last starts before older issue runs."""
    store.enqueue("alpha")
    store.enqueue("beta")
    fix = store.enqueue(
        "gamma", EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY)
    ).run.id
    decider = scheduler(store, held, cap=1)
    assert decider.run_once() == 1 and decider.running == [fix]
    held.release.set()
    decider.stop(5.0)


def test_a_run_waiting_out_its_backoff_is_not_started(store: Store, held: Held) -> None:
    """A run whose run_after lies ahead is left queued; a ready one in another repo starts."""
    store.enqueue("alpha", EnqueueOptions(run_after_s=3600))
    beta = store.enqueue("beta").run.id
    decider = scheduler(store, held)
    assert decider.run_once() == 1 and decider.running == [beta]
    held.release.set()
    decider.stop(5.0)
