"""Recovery decisions on a real store: one fix-forward per broken run, evidence kept."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import EscalationError
from pipeline.run.recovery import FIX_FORWARD_PRIORITY, Recovery, Verdict
from pipeline.store import Run, Store


@dataclass
class Ctx:
    run: Run


@dataclass
class Human:
    """Records what a human would be told, through the tracker and the notifier."""

    told: list[str] = field(default_factory=list)

    def escalated(
        self, run: Run, repo: RepoSettings, reason: str, message: str, resume: str | None = None
    ) -> None:
        self.told.append(f"issue: {reason}: {resume}")

    def notify(self, title: str, body: str, *, kind: str, events: Any) -> None:
        self.told.append(f"{kind}: {title}: {body}")


def _recovery(
    store: Store, tmp_path: Path, human: Human | None = None
) -> tuple[Recovery, RepoSettings]:
    repo = RepoSettings(name="web", tracker="local", slug="acme/web", remote_url="x")
    settings = Settings(database_url=store.url, volume=tmp_path, repos=(repo,))
    store.sync_repos(settings.repos)
    none: Any = None
    human_any: Any = human
    return Recovery(settings, store, human_any, none, human_any), repo


def _finished(store: Store, run: Run, state: str, error_class: str) -> Run:
    claimed = store.claim_next("tester", max_concurrency=5, lease_s=30)
    assert claimed is not None and claimed.id == run.id
    if state in ("failed", "escalated", "cancelled", "succeeded"):
        return store.finish(
            run.id, "tester", claimed.attempt, state, error_class=error_class, error="boom"
        )
    raise AssertionError(state)


def test_a_fix_forward_ending_without_healing_freezes_the_repo(
    store: Store, tmp_path: Path
) -> None:
    """A failed fix-forward freezes its repo (deploy still broken); a chained one does not."""
    human = Human()
    recovery, _ = _recovery(store, tmp_path, human)
    parent = store.enqueue("web").run
    chained = _finished(
        store,
        store.enqueue("web", kind="fix_forward", parent_id=parent.id).run,
        "failed",
        "deploy_broken",
    )
    recovery.on_finished(chained)
    assert not store.get_repo("web").frozen  # type: ignore[union-attr]
    crashed = _finished(
        store,
        store.enqueue("web", kind="fix_forward", parent_id=chained.id).run,
        "failed",
        "agent_crash",
    )
    recovery.on_finished(crashed)
    repo = store.get_repo("web")
    assert repo is not None and repo.frozen and repo.frozen_run_id == crashed.id
    assert any("unfreeze web" in line for line in human.told)


def test_an_escalated_fix_forward_freezes_and_says_how_to_resume(
    store: Store, tmp_path: Path
) -> None:
    """A blocked fix-forward freezes the repo, one escalation row, and names `repos unfreeze`."""
    human = Human()
    recovery, repo = _recovery(store, tmp_path, human)
    parent = store.enqueue("web").run
    fix = store.enqueue("web", kind="fix_forward", parent_id=parent.id).run
    recovery.escalate(Ctx(fix), repo, None, EscalationError("blocked", "cannot see the cause"))  # type: ignore[arg-type]
    frozen = store.get_repo("web")
    assert frozen is not None and frozen.frozen
    assert [e.reason for e in store.list_escalations("web")] == ["blocked"]
    assert human.told[0] == 'issue: blocked: pipeline repos unfreeze web --note "what you did"'
    assert human.told[1].startswith("freeze: ")


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
