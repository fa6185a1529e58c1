"""The per-repo daily budget: over it a repo starts no new runs today; one escalation says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings, Settings
from pipeline.run.budget import DailyBudget
from pipeline.store import Store
from pipeline.testing.sinks import RecordingNotifier


def _spend(store: Store, repo: str, usd: float) -> None:
    run = store.enqueue(repo).run
    claimed = store.claim_next("tester", max_concurrency=5, lease_s=30)
    assert claimed is not None and claimed.id == run.id
    store.update_run(run.id, "tester", claimed.attempt, cost_usd=usd)
    store.finish(run.id, "tester", claimed.attempt, "succeeded")


def _guard(store: Store, tmp_path: Path, notifier: RecordingNotifier) -> DailyBudget:
    """Repo ``web`` with a daily budget of $1, ``api`` with $100."""
    repos = (
        RepoSettings(
            name="web", tracker="local", slug="acme/web", remote_url="x", daily_budget_usd=1.0
        ),
        RepoSettings(
            name="api", tracker="local", slug="acme/api", remote_url="x", daily_budget_usd=100.0
        ),
    )
    settings = Settings(database_url=store.url, volume=tmp_path, repos=repos)
    store.sync_repos(repos)
    return DailyBudget(settings, store, notifier)  # type: ignore[arg-type]


def test_repo_over_its_daily_budget_is_excluded_and_escalated_once(
    store: Store, tmp_path: Path
) -> None:
    """Spending past daily_budget_usd excludes the repo from claims; one escalation is sent."""
    notifier = RecordingNotifier()
    guard = _guard(store, tmp_path, notifier)
    assert guard.over_budget() == frozenset()
    _spend(store, "web", 0.6)
    _spend(store, "web", 0.6)
    _spend(store, "api", 5.0)
    guard._cached = (0.0, frozenset())  # skip the 5 s cache
    web = store.get_repo("web")
    assert web is not None
    assert guard.over_budget() == frozenset({web.id})
    guard._cached = (0.0, frozenset())
    guard.over_budget()
    assert [sent.kind for sent in notifier.sent] == ["escalation"]
    assert [e.reason for e in store.list_escalations("web")] == ["daily_budget"]
    store.enqueue("web")
    assert (
        store.claim_next(
            "tester", max_concurrency=5, lease_s=30, exclude_repo_ids=guard.over_budget()
        )
        is None
    )


def test_a_crash_while_escalating_the_budget_loses_neither_row_nor_notice(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon dies as it writes the escalation: the next check writes it, notice once."""
    notifier = RecordingNotifier()
    guard = _guard(store, tmp_path, notifier)
    _spend(store, "web", 1.5)
    real = store.add_escalation

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(store, "add_escalation", crash)
    with pytest.raises(KeyboardInterrupt):
        guard.over_budget()
    monkeypatch.setattr(store, "add_escalation", real)
    guard._cached = (0.0, frozenset())
    guard.over_budget()
    guard._cached = (0.0, frozenset())
    guard.over_budget()
    assert [e.reason for e in store.list_escalations("web")] == ["daily_budget"]
    assert [sent.kind for sent in notifier.sent] == ["escalation"]
