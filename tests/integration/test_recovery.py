"""Recovery decisions on a real store: resolved, fix-forward, frozen or escalated, as values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.config.settings import RepoSettings, Settings, TrackerSettings
from pipeline.core.errors import EscalationError
from pipeline.core.masking import register_secret
from pipeline.core.states import (
    FIX_FORWARD_PRIORITY,
    DecisionKind,
    RunState,
    Verdict,
    VerdictState,
)
from pipeline.intake.lifecycle import Lifecycle
from pipeline.run.budget import SpendLedger
from pipeline.run.recovery import EVIDENCE_CHARS, Recovery, unhealed_freeze
from pipeline.run.scope import RunScope
from pipeline.run.superseded import not_needed
from pipeline.store import EnqueueOptions, Run, Store
from pipeline.testing.scopes import PLACEHOLDER_ISSUE
from pipeline.testing.sinks import RecordingSink
from pipeline.trackers.local import LocalTracker

BROKEN = Verdict(VerdictState.BROKEN, "health: 500 Internal Server Error", "green", "broken")


def _recovery(store: Store, tmp_path: Path, **repo: Any) -> tuple[Recovery, RepoSettings]:
    settings_repo = RepoSettings(
        name="web", tracker="local", slug="acme/web", remote_url="x", **repo
    )
    settings = Settings(database_url=store.url, volume=tmp_path, repos=(settings_repo,))
    store.sync_repos(settings.repos)
    tracker = TrackerSettings(name="local", kind="local")
    local = LocalTracker(tracker, store, {"acme/web": "web"})
    lifecycle = Lifecycle(store, {"local": local}, {"local": tracker})
    return Recovery(settings, store, lifecycle), settings_repo


def _scope(run: Run, repo: RepoSettings) -> RunScope:
    return RunScope(
        run_id=run.id,
        repo=repo,
        issue=PLACEHOLDER_ISSUE,
        events=RecordingSink(),
        stop=None,
        ledger=SpendLedger(repo),
        agent=lambda: pytest.fail("no agent in a recovery test"),
    )


def _finished(store: Store, run: Run, state: str, error_class: str | None) -> Run:
    claimed = store.claim_next("tester", max_concurrency=5, lease_s=30)
    assert claimed is not None and claimed.id == run.id
    return store.finish(
        run.id, "tester", claimed.attempt, state, error_class=error_class, error="boom"
    )


def test_a_fix_forward_ending_without_healing_freezes_the_repo(
    store: Store, tmp_path: Path
) -> None:
    """A failed fix-forward freezes its repo (deploy still broken); a chained one does not."""
    recovery, _ = _recovery(store, tmp_path)
    parent = _finished(store, store.enqueue("web").run, "failed", "deploy_broken")
    chained = _finished(
        store,
        store.enqueue(
            "web",
            EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY, parent_id=parent.id),
        ).run,
        "failed",
        "deploy_broken",
    )
    assert recovery.freeze_unhealed(chained) is False
    assert not store.get_repo("web").frozen  # type: ignore[union-attr]
    crashed = _finished(
        store,
        store.enqueue(
            "web",
            EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY, parent_id=chained.id),
        ).run,
        "failed",
        "agent_crash",
    )
    assert recovery.freeze_unhealed(crashed) is True
    repo = store.get_repo("web")
    assert repo is not None and repo.frozen and repo.frozen_run_id == crashed.id
    reason = f"fix-forward run {crashed.id} ended failed (agent_crash)"
    assert (repo.frozen_reason, repo.frozen_by) == (reason, "afk-pipeline")
    assert [(e.reason, e.detail) for e in store.list_escalations("web")] == [
        ("frozen", f"{reason}: boom")
    ]
    assert recovery.freeze_unhealed(crashed) is False  # frozen once


def test_an_escalated_fix_forward_freezes_and_decides_frozen(store: Store, tmp_path: Path) -> None:
    """A blocked fix-forward freezes the repo, records one escalation and returns FROZEN."""
    recovery, repo = _recovery(store, tmp_path)
    parent = store.enqueue("web").run
    fix = store.enqueue(
        "web",
        EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY, parent_id=parent.id),
    ).run
    exc = EscalationError("blocked", "cannot see the cause")
    decision = recovery.escalate(_scope(fix, repo), fix, exc)
    assert decision.kind == DecisionKind.FROZEN and decision.needs_human
    assert decision.outcome.state == RunState.ESCALATED
    assert decision.outcome.error_class == "blocked"
    frozen = store.get_repo("web")
    assert frozen is not None and frozen.frozen
    assert [e.reason for e in store.list_escalations("web")] == ["blocked"]


def test_an_escalated_issue_run_is_not_frozen(store: Store, tmp_path: Path) -> None:
    """An issue run's escalation records one row and decides ESCALATED, the repo stays active."""
    recovery, repo = _recovery(store, tmp_path)
    run = store.enqueue("web").run
    decision = recovery.escalate(_scope(run, repo), run, EscalationError("tests_red", "red"))
    assert decision.kind == DecisionKind.ESCALATED
    assert not store.get_repo("web").frozen  # type: ignore[union-attr]


def test_a_broken_deploy_decides_fix_forward_then_frozen(store: Store, tmp_path: Path) -> None:
    """Broken with fix-forwards left queues one; broken at the bound freezes, never raising."""
    recovery, repo = _recovery(store, tmp_path, max_fix_forwards=1)
    parent = store.enqueue("web").run
    first = recovery.decide(_scope(parent, repo), parent, "a" * 40, BROKEN)
    assert first.kind == DecisionKind.FIX_FORWARD and first.child_run_id is not None
    assert first.outcome.state == RunState.FAILED
    assert first.outcome.error_class == "deploy_broken"
    child = store.get_run(first.child_run_id)
    assert child is not None
    last = recovery.decide(_scope(child, repo), child, "b" * 40, BROKEN)
    assert last.kind == DecisionKind.FROZEN and last.outcome.error_class == "frozen"
    assert store.get_repo("web").frozen  # type: ignore[union-attr]


def test_healthy_and_inconclusive_verdicts(store: Store, tmp_path: Path) -> None:
    """Healthy resolves with a summary; inconclusive escalates ``deploy_inconclusive``."""
    recovery, repo = _recovery(store, tmp_path)
    run = store.enqueue("web").run
    healthy = Verdict(VerdictState.HEALTHY, "ok", "green", "healthy")
    resolved = recovery.decide(_scope(run, repo), run, "c" * 40, healthy)
    assert resolved.kind == DecisionKind.RESOLVED and not resolved.needs_human
    assert resolved.outcome.state == RunState.SUCCEEDED and "cccccccccccc" in (
        resolved.outcome.summary or ""
    )
    unsure = Verdict(VerdictState.INCONCLUSIVE, "CI: none appeared", "-", "not watched")
    escalated = recovery.decide(_scope(run, repo), run, "c" * 40, unsure)
    assert escalated.kind == DecisionKind.ESCALATED
    assert escalated.outcome.error_class == "deploy_inconclusive"


def test_a_repeated_watch_queues_one_fix_forward(store: Store, tmp_path: Path) -> None:
    """Judging the same broken run twice (a crash mid-watch) queues one fix-forward."""
    recovery, repo = _recovery(store, tmp_path)
    parent = store.enqueue("web").run
    first = recovery._fix_forward_child(_scope(parent, repo), parent, "a" * 40, BROKEN)
    again = recovery._fix_forward_child(_scope(parent, repo), parent, "a" * 40, BROKEN)
    assert first.id == again.id
    assert [r.id for r in store.children(parent.id)] == [first.id]
    assert first.kind == "fix_forward" and first.priority == FIX_FORWARD_PRIORITY
    evidence = recovery.evidence_for(first)
    assert evidence is not None and "500 Internal Server Error" in evidence
    assert recovery.chain_root(first).id == parent.id


def test_a_fix_forward_runs_only_if_its_broken_run_ended_broken(
    store: Store, tmp_path: Path
) -> None:
    """Watched again after a crash, the broken run's final ending decides its fix-forward:
    broken heals; healthy leaves nothing to heal; any other ending supersedes it, which
    freezes nothing (that ending told the human)."""
    recovery, _ = _recovery(store, tmp_path)
    endings = {}
    for state, error_class in [
        ("failed", "deploy_broken"),
        ("succeeded", None),
        ("escalated", "deploy_inconclusive"),
        ("failed", "timeout"),
    ]:
        parent = _finished(store, store.enqueue("web").run, state, error_class)
        endings[f"{state} {error_class}"] = not_needed(parent)
    endings["cancelled"] = not_needed(store.cancel_run(store.enqueue("web").run.id, "alice"))
    assert endings["failed deploy_broken"] is None
    healthy = endings["succeeded None"]
    assert healthy is not None and healthy.state == RunState.SUCCEEDED
    assert "nothing to heal" in (healthy.summary or "")
    for key in ("escalated deploy_inconclusive", "failed timeout", "cancelled"):
        ending = endings[key]
        assert ending is not None and ending.state == RunState.CANCELLED, key
        assert ending.error_class == "superseded" and "nothing was pushed" in (ending.error or "")
    inconclusive = endings["escalated deploy_inconclusive"]
    assert inconclusive is not None and "escalated (deploy_inconclusive)" in (
        inconclusive.error or ""
    )
    parent = store.enqueue("web").run  # still queued: the claim holds its fix-forward back
    fix = store.enqueue(
        "web",
        EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY, parent_id=parent.id),
    ).run
    assert recovery.not_needed(fix) is None
    assert inconclusive is not None and unhealed_freeze(fix, inconclusive) is None


def test_a_secret_the_evidence_cut_starts_in_is_masked(store: Store, tmp_path: Path) -> None:
    """Evidence longer than the escalation shows is cut at its start, after a heading: a
    secret cut there is no text's edge, so the evidence is masked before it is cut."""
    key = "sntl-ci-token-7Qx9vLp2"
    register_secret(key)
    recovery, repo = _recovery(store, tmp_path, max_fix_forwards=0)
    run = store.enqueue("web").run
    for shown in range(1, len(key)):
        evidence = f"{key} {'x' * (EVIDENCE_CHARS - shown - 1)}"
        verdict = Verdict(VerdictState.BROKEN, evidence, "red", "broken")
        decision = recovery.decide(_scope(run, repo), run, "a" * 40, verdict)
        assert decision.kind == DecisionKind.FROZEN
        assert f"Last evidence:\n{key[-shown:]} " not in (decision.outcome.error or ""), shown
