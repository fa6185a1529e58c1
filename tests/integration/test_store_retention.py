"""Retention: `pipeline db prune` removes old history in batches and keeps what is evidence.

The world is seeded in bulk (one executemany for the runs, one INSERT … SELECT for
their events), not through millions of store calls. Of its 2n runs the older half
ended 200 days ago and the newer one a day ago; the policy keeps timelines 30 days
and runs 90. Among the old runs some must stay: escalated ones, a frozen repo's run,
one that never ended, one with a notification still pending, and the two ancestors of
a fix-forward that is itself recent.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text

from pipeline.cli.main import main
from pipeline.store import PruneReport, RetentionPolicy, Store
from pipeline.store import retention as store_retention
from pipeline.store.models import EscalationRow, NotificationRow, RunEventRow, RunRow
from pipeline.testing.configs import write_config

KEEP_EVENTS_DAYS, KEEP_RUNS_DAYS = 30, 90
ESCALATED, FROZEN, UNFINISHED, PENDING, DELIVERED = (1, 2), 3, 4, 5, 6
ANCESTORS, PRUNED_PAIR = (7, 8), (9, 10)


@dataclass(frozen=True)
class World:
    """Run ids of the seeded history (ids 1..n are old, n+1..2n recent)."""

    n: int
    per_run: int

    @property
    def kept_whole(self) -> set[int]:
        """Old runs kept with their whole timeline."""
        return {*ESCALATED, FROZEN, UNFINISHED}

    @property
    def kept_rows(self) -> set[int]:
        """Old runs whose row stays while their timeline goes."""
        return {PENDING, *ANCESTORS}

    @property
    def middle_aged(self) -> set[int]:
        """Recent-half runs that ended 60 days ago: row kept, timeline pruned."""
        return {self.n + 2, self.n + 3}


@pytest.fixture
def store(store: Store) -> Store:
    """The shared store with alpha and beta enrolled."""
    store.ensure_repo("alpha")
    store.ensure_repo("beta")
    return store


def _run_row(run_id: int, world: World, now: datetime, repos: dict[str, int]) -> dict[str, Any]:
    days = 200 if run_id <= world.n else (60 if run_id in world.middle_aged else 1)
    ended = now - timedelta(days=days)
    row: dict[str, Any] = {
        "id": run_id,
        "repo_id": repos["beta" if run_id == FROZEN else "alpha"],
        "state": "escalated" if run_id in ESCALATED else "succeeded",
        "run_after": ended,
        "created_at": ended - timedelta(hours=1),
        "updated_at": ended,
        "started_at": ended - timedelta(minutes=30),
        "finished_at": ended,
        "parent_id": {ANCESTORS[1]: ANCESTORS[0], PRUNED_PAIR[1]: PRUNED_PAIR[0]}.get(run_id),
    }
    if run_id == world.n + 1:
        row |= {"parent_id": ANCESTORS[1], "kind": "fix_forward"}
    if run_id == UNFINISHED:
        row |= {"state": "queued", "finished_at": None, "started_at": None}
    return row


def _notification(run_id: int, state: str, now: datetime) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "kind": "ended",
        "channel": "json://example.invalid",
        "channel_key": "k",
        "title": "t",
        "body": "b",
        "state": state,
        "next_attempt_at": now,
        "created_at": now,
        "updated_at": now,
    }


def seed(store: Store, n: int, per_run: int) -> World:
    """2n finished runs with ``per_run`` events each, in three statements (and a few rows)."""
    world = World(n, per_run)
    now = store.now()
    repos = {r.name: r.id for r in store.list_repos()}
    rows = [_run_row(i, world, now, repos) for i in range(1, 2 * n + 1)]
    counter = (
        "WITH RECURSIVE counter(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM counter "
        "WHERE i < :per_run) "
        "INSERT INTO run_events (run_id, attempt, ts, kind, message, data_json) "
        "SELECT r.id, 0, COALESCE(r.finished_at, r.created_at), 'agent', 'line', '{}' "
        "FROM runs r CROSS JOIN counter"
    )
    with store.engine.begin() as conn:
        conn.execute(insert(RunRow), rows)
        conn.execute(text(counter), {"per_run": per_run})
        conn.execute(
            insert(EscalationRow),
            [
                {"run_id": i, "repo_id": repos["alpha"], "reason": "test", "created_at": now}
                for i in ESCALATED
            ],
        )
        conn.execute(
            insert(NotificationRow),
            [_notification(PENDING, "pending", now), _notification(DELIVERED, "delivered", now)],
        )
    assert store.freeze_repo("beta", "deploy broken", by="test", run_id=FROZEN)
    return world


def prune(store: Store, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    """`pipeline db prune --json` on the store's database: (exit code, summary, stderr)."""
    config = write_config(
        tmp_path / "pipeline.toml",
        {"history": {"keep_events_days": KEEP_EVENTS_DAYS, "keep_runs_days": KEEP_RUNS_DAYS}},
    )
    out, err = io.StringIO(), io.StringIO()
    argv = ["db", "prune", "--config", str(config), "--database-url", store.url, "--json"]
    code = main([*argv, *extra], out, err)
    return code, (json.loads(out.getvalue()) if out.getvalue() else {}), err.getvalue()


def _counts(store: Store) -> dict[int, int]:
    """Events per run, for every run that still exists (0 for a run without events)."""
    with store.engine.connect() as conn:
        runs = {int(i): 0 for i in conn.execute(select(RunRow.id)).scalars()}
        query = select(RunEventRow.run_id, func.count()).group_by(RunEventRow.run_id)
        runs |= {int(run_id): int(count) for run_id, count in conn.execute(query)}
    return runs


def check_prune(store: Store, tmp_path: Path, n: int, per_run: int) -> None:
    world = seed(store, n, per_run)
    before = _counts(store)
    code, dry, _ = prune(store, tmp_path, "--dry-run")
    assert code == 0 and dry["dry_run"] is True
    assert _counts(store) == before, "a dry run removed something"

    code, report, _ = prune(store, tmp_path)
    after = _counts(store)
    gone = set(before) - set(after)
    old = set(range(1, n + 1))
    assert code == 0
    assert gone == old - world.kept_whole - world.kept_rows
    assert {i for i in world.kept_whole if after[i] >= per_run} == world.kept_whole
    assert {i for i in world.kept_rows | world.middle_aged if after[i] == 0} == (
        world.kept_rows | world.middle_aged
    )
    recent = set(range(n + 1, 2 * n + 1)) - world.middle_aged
    assert all(after[i] == per_run for i in recent), "a recent run lost events"
    expected = {"runs": n - 7, "events": (n - 2) * per_run, "notifications": 1}
    assert {k: report[k] for k in expected} == expected
    assert {k: dry[k] for k in expected} == expected, "the dry run's count differs"
    assert sum(before.values()) - sum(after.values()) == report["events"]
    with store.engine.connect() as conn:
        escalations = conn.execute(select(func.count(EscalationRow.id))).scalar_one()
        notifications = conn.execute(select(NotificationRow.run_id)).scalars().all()
    assert escalations == len(ESCALATED) and notifications == [PENDING]

    code, again, _ = prune(store, tmp_path)
    assert code == 0 and (again["runs"], again["events"], again["notifications"]) == (0, 0, 0)
    assert _counts(store) == after


def test_prune_keeps_evidence_and_the_unfinished_and_a_second_prune_removes_nothing(
    store: Store, tmp_path: Path
) -> None:
    """Old runs go whole, middle-aged ones lose their timeline, evidence stays; twice is once."""
    check_prune(store, tmp_path, n=30, per_run=5)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_prune_ten_thousand_runs_of_two_hundred_events(store: Store, tmp_path: Path) -> None:
    """10,000 finished runs with 200 events each, half old: the prune removes what it should."""
    check_prune(store, tmp_path, n=5000, per_run=200)


def test_prune_refuses_a_policy_that_keeps_events_longer_than_runs(
    store: Store, tmp_path: Path
) -> None:
    """Overrides that keep timelines longer than runs exit 2 naming both, removing nothing."""
    seed(store, 3 + 10, 2)
    before = _counts(store)
    code, _, err = prune(store, tmp_path, "--keep-events-days", "100", "--keep-runs-days", "50")
    assert code == 2
    assert "keep_events_days (100) must not exceed keep_runs_days (50)" in err
    assert _counts(store) == before


def test_prune_refuses_more_days_than_the_config_accepts(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An override past [history]'s 36500 days exits 2 naming the range: it used to end in
    a traceback (the cutoff date out of range), removing nothing either way."""
    seed(store, 3 + 10, 2)
    before = _counts(store)
    with pytest.raises(SystemExit) as stopped:
        prune(store, tmp_path, "--keep-runs-days", "99999999999")
    assert stopped.value.code == 2
    assert "--keep-runs-days: must be a whole number from 1 to 36500" in capsys.readouterr().err
    assert _counts(store) == before


def test_a_run_gaining_a_child_mid_prune_keeps_its_batch_until_the_next_prune(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A child queued for an old run mid-prune: that batch stays, the next prune decides."""
    monkeypatch.setattr(store_retention, "RUN_BATCH", 5)
    world = seed(store, 30, 2)
    parent = PRUNED_PAIR[0]
    child = 2 * world.n + 1

    def queue_child(report: PruneReport) -> None:
        if child in _counts(store):
            return
        now = store.now()
        row = {"id": child, "repo_id": 1, "run_after": now, "created_at": now, "updated_at": now}
        with store.engine.begin() as conn:
            conn.execute(insert(RunRow), [row | {"parent_id": parent, "state": "queued"}])

    policy = RetentionPolicy(KEEP_EVENTS_DAYS, KEEP_RUNS_DAYS)
    first = store.prune_history(policy, progress=queue_child)
    assert parent in _counts(store) and "gained a child while pruning" in caplog.text
    second = store.prune_history(policy)
    remaining = _counts(store)
    assert parent in remaining and child in remaining
    old_left = {i for i in remaining if i <= world.n}
    assert old_left == world.kept_whole | world.kept_rows | {parent}
    assert first.runs + second.runs == world.n - 7 - 1
    assert store.prune_history(policy).removed_anything is False
