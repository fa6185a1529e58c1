"""Recovery decisions on a real store: one fix-forward per broken run, evidence kept."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.recovery import FIX_FORWARD_PRIORITY, Recovery, Verdict
from pipeline.settings import RepoSettings, Settings
from pipeline.store import Run, Store


@dataclass
class Ctx:
    run: Run


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    s = Store(database_url)
    s.upgrade()
    yield s
    s.close()


def _recovery(store: Store, tmp_path: Path) -> tuple[Recovery, RepoSettings]:
    repo = RepoSettings(name="web", tracker="local", slug="acme/web", remote_url="x")
    settings = Settings(database_url=store.url, volume=tmp_path, repos=(repo,))
    store.sync_repos(settings.repos)
    none: Any = None
    return Recovery(settings, store, none, none, none), repo


def test_a_repeated_watch_queues_one_fix_forward(store: Store, tmp_path: Path) -> None:
    """Judging the same broken run twice (a crash mid-watch) queues one fix-forward."""
    recovery, repo = _recovery(store, tmp_path)
    parent = store.enqueue("web").run
    verdict = Verdict("broken", "health: 500 Internal Server Error", "green", "broken")
    first = recovery._fix_forward_child(Ctx(parent), repo, None, "a" * 40, verdict)  # type: ignore[arg-type]
    again = recovery._fix_forward_child(Ctx(parent), repo, None, "a" * 40, verdict)  # type: ignore[arg-type]
    assert first.id == again.id
    assert [r.id for r in store.children(parent.id)] == [first.id]
    assert first.kind == "fix_forward" and first.priority == FIX_FORWARD_PRIORITY
    evidence = recovery.evidence_for(first)
    assert evidence is not None and "500 Internal Server Error" in evidence
    assert recovery.chain_root(first).id == parent.id
