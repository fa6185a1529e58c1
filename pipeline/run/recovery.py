"""After the watch: resolve, fix forward, or freeze; and every escalation's bookkeeping.

A broken deploy starts a fix-forward run: an ordinary run of kind
``fix_forward`` whose parent is the run that broke it, queued above every
issue run of the repo, its prompt carrying the failure evidence and the diff
of the breaking commit. A chain of at most ``max_fix_forwards`` such runs is
tried; if the deploy is still broken the repo is frozen with the worktree and
logs kept under ``<volume>/frozen/<run-id>/``, nothing is reverted, and a
human is called with the exact command to resume.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import EscalationError, FatalError, PipelineError
from pipeline.core.events import EventSink
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.queue.worker import RunContext
from pipeline.run.lifecycle import Lifecycle
from pipeline.store import EnqueueOptions, Run, Store
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

log = logging.getLogger(__name__)

FIX_FORWARD_PRIORITY = 1_000_000
NotifyKind = Literal["escalation", "freeze", "success"]
EVIDENCE_CHARS = 6_000
DIFF_CHARS = 8_000


class Notifies(Protocol):
    def notify(
        self,
        title: str,
        body: str,
        *,
        kind: NotifyKind,
        events: EventSink,
        run_id: int | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class Verdict:
    """The watch's conclusion for one pushed SHA."""

    state: str  # healthy | broken | inconclusive
    evidence: str
    ci: str
    deploy: str


class Recovery:
    """Decides what follows a verdict and does the escalation bookkeeping."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        lifecycle: Lifecycle,
        workspaces: Workspaces,
        notifier: Notifies,
    ) -> None:
        self.settings = settings
        self.store = store
        self.lifecycle = lifecycle
        self.workspaces = workspaces
        self.notifier = notifier

    # The chain ------------------------------------------------------------------

    def chain(self, run: Run) -> list[Run]:
        """``run`` and its ancestors, newest first."""
        runs = [run]
        while runs[-1].parent_id is not None and len(runs) < 50:
            parent = self.store.get_run(runs[-1].parent_id)
            if parent is None:
                break
            runs.append(parent)
        return runs

    def chain_root(self, run: Run) -> Run:
        return self.chain(run)[-1]

    def evidence_for(self, run: Run) -> str | None:
        for event in self.store.run_events(run.id):
            if event.kind == "evidence":
                return str(event.data.get("prompt", event.message))
        # Queued, then a crash before its evidence was written: say what is known.
        parent = self.store.get_run(run.parent_id) if run.parent_id is not None else None
        if parent is None or not parent.pushed_sha:
            return None
        return (
            f"Fix-forward: the deploy of commit {parent.pushed_sha} (run {parent.id}) is "
            "broken. Check the deploy, find the cause and fix it forward, test first."
        )

    # Verdicts -------------------------------------------------------------------

    def decide(
        self,
        ctx: RunContext,
        repo: RepoSettings,
        ws: PreparedWorkspace | None,
        sha: str,
        verdict: Verdict,
    ) -> str | None:
        if verdict.state == "healthy":
            self._healthy(ctx, repo, ws, sha, verdict)
            return None
        if verdict.state == "broken":
            self._broken(ctx, repo, ws, sha, verdict)
        exc = EscalationError(
            "deploy_inconclusive",
            f"The watch of {sha[:12]} was inconclusive: {verdict.evidence}\n"
            "Check CI and the deploy by hand; nothing was reverted.",
        )
        self.escalate(ctx, repo, ws, exc)
        raise exc

    def _healthy(
        self,
        ctx: RunContext,
        repo: RepoSettings,
        ws: PreparedWorkspace | None,
        sha: str,
        verdict: Verdict,
    ) -> None:
        run = ctx.run
        if ws is not None:  # first: a tracker error below must not keep the slot busy
            self.workspaces.release(ws, succeeded=True)
        if run.kind == "issue":
            self.lifecycle.succeeded(run, repo, sha, verdict.ci, verdict.deploy)
        else:
            root = self.chain_root(run)
            if root.issue_number is not None:
                self.lifecycle.resolve_issue(
                    root.id,
                    root.issue_number,
                    repo,
                    sha,
                    verdict.ci,
                    f"{verdict.deploy} (healed by fix-forward run {run.id})",
                )
        ctx.update(summary=f"pushed {sha[:12]}; CI {verdict.ci}; deploy {verdict.deploy}")
        if self.settings.notify.notify_success:
            self.notifier.notify(
                f"{repo.name}: run {run.id} succeeded",
                f"Pushed {sha} to {repo.default_branch}. CI: {verdict.ci}. "
                f"Deploy: {verdict.deploy}.",
                kind="success",
                events=self._notify_events(run.id),
                run_id=run.id,
            )

    def _broken(
        self,
        ctx: RunContext,
        repo: RepoSettings,
        ws: PreparedWorkspace | None,
        sha: str,
        verdict: Verdict,
    ) -> None:
        run = ctx.run
        fix_forwards = sum(1 for r in self.chain(run) if r.kind == "fix_forward")
        if fix_forwards >= repo.max_fix_forwards:
            self._freeze(ctx, repo, ws, sha, verdict, fix_forwards)
        child = self._fix_forward_child(ctx, repo, ws, sha, verdict)
        ctx.events(
            "recovery",
            f"{_headline(verdict)}; fix-forward run {child.id} queued first in line",
            {"fix_forward_run": child.id, "sha": sha},
        )
        if ws is not None:
            self.workspaces.release(ws, succeeded=False)
        raise FatalError(
            "deploy_broken",
            f"{sha[:12]} is broken after its push ({_headline(verdict)}); "
            f"fix-forward run {child.id} is healing it",
        )

    def _fix_forward_child(
        self,
        ctx: RunContext,
        repo: RepoSettings,
        ws: PreparedWorkspace | None,
        sha: str,
        verdict: Verdict,
    ) -> Run:
        """The run's fix-forward, queued once even if this watch is repeated after a crash."""
        existing = [r for r in self.store.children(ctx.run.id) if r.kind == "fix_forward"]
        if existing:
            return existing[0]
        options = EnqueueOptions(
            kind="fix_forward",
            priority=FIX_FORWARD_PRIORITY,
            parent_id=ctx.run.id,
            max_attempts=self.settings.scheduler.max_attempts,
            timeout_s=repo.run_timeout_s or self.settings.scheduler.run_timeout_s,
            requested_by="afk-pipeline",
        )
        child = self.store.enqueue(repo.name, options).run
        self.store.record_event(
            child.id,
            "evidence",
            f"deploy of {sha[:12]} broken: fix forward",
            {"prompt": self._fix_prompt(repo, ws, sha, verdict), "broken_sha": sha},
        )
        return child

    def _freeze(
        self,
        ctx: RunContext,
        repo: RepoSettings,
        ws: PreparedWorkspace | None,
        sha: str,
        verdict: Verdict,
        fix_forwards: int,
    ) -> None:
        run = ctx.run
        reason = (
            f"deploy of {sha[:12]} still broken after {fix_forwards} fix-forward run(s) "
            f"(run {run.id})"
        )
        self.freeze(repo, reason, run.id)
        ctx.events("recovery", f"repo {repo.name} frozen: {reason}", {"frozen": True})
        exc = EscalationError(
            "frozen",
            f"{reason}.\nLast evidence:\n{verdict.evidence[-EVIDENCE_CHARS:]}\n"
            f"The repo's queue is stopped and nothing was reverted. After fixing "
            f"{repo.default_branch} by hand, resume with:\n"
            f'  pipeline repos unfreeze {repo.name} --note "what you did"',
        )
        self.escalate(ctx, repo, ws, exc, extra={"broken_sha": sha, "frozen": True})
        raise exc

    def _fix_prompt(
        self, repo: RepoSettings, ws: PreparedWorkspace | None, sha: str, verdict: Verdict
    ) -> str:
        diff = self._diff(ws, sha)
        return (
            f"Fix-forward: commit {sha} on {repo.default_branch} is broken after its push "
            f"({_headline(verdict)}).\n"
            "Do not revert it blindly: find the cause and fix it forward, test first.\n\n"
            f"Failure evidence (CI log tail or probe output):\n{verdict.evidence[-EVIDENCE_CHARS:]}"
            f"\n\nThe commit that broke it:\n{diff}"
        )

    def _diff(self, ws: PreparedWorkspace | None, sha: str) -> str:
        if ws is None:
            return f"(see `git show {sha}`)"
        try:
            text = GitRunner(GitRepo.mirror(ws.mirror)).ok(
                "show", "--no-ext-diff", "--no-textconv", "--stat", "--patch", "-U3", sha
            )
        except PipelineError as exc:
            text = f"(git show {sha} failed: {exc})"
        return text[:DIFF_CHARS]

    # Escalation -----------------------------------------------------------------

    def escalate(
        self,
        ctx: RunContext,
        repo: RepoSettings,
        ws: PreparedWorkspace | None,
        exc: EscalationError,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        """Keep the evidence, record the escalation, label the issue, call a human."""
        run = ctx.run
        kept: Path | None = None
        if ws is not None:
            kept = self.workspaces.keep_evidence(
                ws,
                run_id=run.id,
                repo=repo.name,
                reason=f"{exc.reason}: {exc}",
                head_sha=run.pushed_sha or run.head_sha,
                extra=dict(extra or {}),
            )
        where = f"\nEvidence kept in {kept}" if kept else ""
        message = f"{exc}{where}"
        frozen = exc.reason == "frozen"
        if run.kind == "fix_forward" and not frozen:
            # The deploy is known broken and this fix-forward could not heal it: the
            # next queued issue must not ship on top of it.
            frozen = self.freeze(repo, f"fix-forward run {run.id} ended {exc.reason}", run.id)
        self.store.add_escalation(repo.name, exc.reason, message, run.id)
        resume = (
            f'pipeline repos unfreeze {repo.name} --note "what you did"'
            if frozen
            else f"pipeline runs retry {run.id}"
        )
        root = self.chain_root(run)
        try:
            self.lifecycle.escalated(root, repo, exc.reason, message, resume)
        except Exception as err:  # the tracker being down must not hide the escalation
            ctx.events("tracker", f"could not label the issue as blocked: {err}")
        self.notifier.notify(
            f"{repo.name}: run {run.id} needs a human ({exc.reason})",
            f"{message}\n\nReview: pipeline runs show {run.id}\nResume once fixed: {resume}",
            kind="freeze" if frozen else "escalation",
            events=self._notify_events(run.id),
            run_id=run.id,
        )

    def freeze(self, repo: RepoSettings, reason: str, run_id: int) -> bool:
        """Freeze ``repo`` for ``run_id``; the caller records the escalation. True if frozen."""
        self.store.freeze_repo(repo.name, reason, by="afk-pipeline", run_id=run_id)
        return True

    def on_finished(self, run: Run) -> None:
        """A fix-forward that ended without healing (failed, cancelled) freezes its repo.

        Escalated fix-forwards were frozen by ``escalate``; one that failed with
        ``deploy_broken`` has queued the next fix-forward of its chain.
        """
        if run.kind != "fix_forward" or run.state not in ("failed", "cancelled"):
            return
        if run.error_class == "deploy_broken":
            return
        repo = self.settings.repo(run.repo_name)
        if repo is None:
            return
        reason = f"fix-forward run {run.id} ended {run.state} ({run.error_class or 'no cause'})"
        self.store.freeze_repo(
            repo.name,
            reason,
            by="afk-pipeline",
            run_id=run.id,
            escalation=f"frozen by afk-pipeline: {reason}",
        )
        self.notifier.notify(
            f"{repo.name}: frozen, the deploy is still broken",
            f"{reason}: {run.error or ''}\nThe repo's queue is stopped; nothing was reverted.\n"
            f"Review: pipeline runs show {run.id}\n"
            f'Resume once fixed: pipeline repos unfreeze {repo.name} --note "what you did"',
            kind="freeze",
            events=self._notify_events(run.id),
            run_id=run.id,
        )

    def _notify_events(self, run_id: int) -> EventSink:
        """Where a notification's outcome is recorded: the run's timeline, without the lease.

        Sends run in the background and finish after the run has ended, when
        its lease-fenced sink refuses every write; the store's unfenced
        ``record_event`` keeps "each notification is a run event" true.
        """

        def record(kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
            self.store.record_event(run_id, kind, message, data)

        return record


def _headline(verdict: Verdict) -> str:
    """What broke, in a few words: CI or the deploy."""
    if verdict.evidence.startswith("CI failed"):
        return "CI failed"
    return "the deploy is broken"
