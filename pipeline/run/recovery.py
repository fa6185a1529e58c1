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
from collections.abc import Callable, Mapping

from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import EscalationError, FatalError, PipelineError, RetryableError
from pipeline.core.faults import checkpoint
from pipeline.core.masking import mask
from pipeline.core.states import (
    DEPLOY_BROKEN_CLASS,
    FIX_FORWARD_PRIORITY,
    FROZEN_REASON,
    SUPERSEDED_CLASS,
    Decision,
    DecisionKind,
    Outcome,
    RunState,
    Verdict,
    VerdictState,
)
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.intake.lifecycle import Lifecycle
from pipeline.intake.sanitize import shown_url
from pipeline.run.prompt import IssueInfo
from pipeline.run.scope import RunScope
from pipeline.run.superseded import not_needed
from pipeline.store import EnqueueOptions, RepoFreeze, Run, Store
from pipeline.watch.ci import ci_source

log = logging.getLogger(__name__)

__all__ = ["FIX_FORWARD_PRIORITY", "Recovery", "Verdict", "unhealed_freeze"]

FROZEN_BY = "afk-pipeline"
# The key of the event data that holds a resolution the tracker refused at the time
# (``Recovery.resolve``); the ending pass (``pipeline.run.endings``) carries it out.
PENDING_RESOLUTION = "resolve"

# The evidence event's note of what broke: a CI failure may turn green on a re-run.
BROKEN_BY_CI = "ci"

EVIDENCE_CHARS = 6_000
DIFF_CHARS = 8_000


class Recovery:
    """Decides what follows a verdict or an escalation; returns the decision, never raises it."""

    def __init__(self, settings: Settings, store: Store, lifecycle: Lifecycle) -> None:
        self.settings = settings
        self.store = store
        self.lifecycle = lifecycle

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

    def fix_forward_issue(self, run: Run, repo: RepoSettings) -> IssueInfo:
        """What a fix-forward run works on, in place of an issue."""
        root = self.chain_root(run)
        return IssueInfo(
            ref=f"fix-{run.id}",
            number=root.issue_number or 0,
            title=f"Fix forward: the deploy of run {run.parent_id} is broken",
            body=f"Heal the broken deploy of {repo.name} (chain started by run {root.id}).",
            comments=(),
            url=root.issue_url or "",
            author="afk-pipeline",
        )

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

    def not_needed(self, run: Run) -> Outcome | None:
        """The ending of a fix-forward its broken run's final verdict did not ask for
        (``pipeline.run.superseded``), else None: it heals."""
        if run.kind != "fix_forward" or run.parent_id is None:
            return None
        return not_needed(self.store.get_run(run.parent_id))

    # Verdicts -------------------------------------------------------------------

    def decide(self, scope: RunScope, run: Run, sha: str, verdict: Verdict) -> Decision:
        """Resolved, fix-forward, frozen or escalated: what the watch's verdict means."""
        if verdict.state == VerdictState.HEALTHY:
            return self._resolved(scope, run, sha, verdict)
        if verdict.state == VerdictState.BROKEN:
            broken = verdict.judged or sha  # whose CI failed: after a cancel, a later commit
            fix_forwards = sum(1 for r in self.chain(run) if r.kind == "fix_forward")
            if fix_forwards >= scope.repo.max_fix_forwards:
                return self._frozen(scope, run, broken, verdict, fix_forwards)
            return self._fix_forward(scope, run, broken, verdict)
        exc = EscalationError(
            "deploy_inconclusive",
            f"The watch of {sha[:12]} was inconclusive: {verdict.evidence}\n"
            "Check CI and the deploy by hand; nothing was reverted.",
        )
        return self.escalate(scope, run, exc, {"broken_sha": sha})

    def _resolved(self, scope: RunScope, run: Run, sha: str, verdict: Verdict) -> Decision:
        if scope.lease is not None:  # first: a tracker error below must not keep the slot busy
            scope.lease.succeeded()
        # An issue run speaks for itself (also one resuming an escalated run, its parent);
        # a fix-forward resolves the issue of the run at its chain's root.
        root, deploy, done = run, verdict.deploy, sha
        if run.kind != "issue":
            healer = f"healed by fix-forward run {run.id}"
            if not run.pushed_sha:  # it changed nothing: the broken commit's CI re-ran green
                # Done in the chain's last push, not a later commit holding it that was judged.
                done = next((r.pushed_sha for r in self.chain(run) if r.pushed_sha), sha)
                green = "CI" if done == sha else f"CI of {sha[:12]}, which holds it,"
                healer = f"{green} re-run green; fix-forward run {run.id} found nothing to change"
            root, deploy = self.chain_root(run), f"{deploy} ({healer})"
        if root.issue_number is not None:
            resolution = {"root": root.id, "number": root.issue_number, "sha": done}
            self.resolve(scope, {**resolution, "ci": verdict.ci, "deploy": deploy})
        # A fix-forward that found nothing to change pushed nothing: it watched ``sha`` again.
        did = f"pushed {sha[:12]}" if run.pushed_sha else f"nothing to change; watched {sha[:12]}"
        summary = f"{did}; CI {verdict.ci}; deploy {verdict.deploy}"
        return Decision(DecisionKind.RESOLVED, Outcome(RunState.SUCCEEDED, summary=summary))

    def resolve(self, scope: RunScope, resolution: Mapping[str, object]) -> None:
        """Tell the issue its change is live and close it; the tracker's answer decides nothing.

        The change is pushed and healthy: a forge that is down or refuses just now must
        not turn the run into a retry or a failure. The resolution waits on the run's
        timeline and the ending pass carries it out (``resolve_pending``).
        """
        try:
            self.resolve_pending(scope.repo, resolution)
        except (RetryableError, FatalError) as exc:
            scope.events(
                "tracker",
                f"issue #{resolution['number']} not resolved yet ({exc}); "
                "the ending pass tries again",
                {PENDING_RESOLUTION: dict(resolution)},
            )

    def resolve_pending(self, repo: RepoSettings, resolution: Mapping[str, object]) -> None:
        """The "done" comment and the closing of a resolution (idempotent)."""
        self.lifecycle.resolve_issue(
            int(str(resolution["root"])),
            int(str(resolution["number"])),
            repo,
            str(resolution["sha"]),
            str(resolution["ci"]),
            str(resolution["deploy"]),
        )

    def _fix_forward(self, scope: RunScope, run: Run, sha: str, verdict: Verdict) -> Decision:
        child = self._fix_forward_child(scope, run, sha, verdict)
        checkpoint("fix_forward_queued", run.id)  # queued, this run's ending not yet written
        scope.events(
            "recovery",
            f"{_headline(verdict)}; fix-forward run {child.id} queued first in line",
            {"fix_forward_run": child.id, "sha": sha},
        )
        error = (
            f"{sha[:12]} is broken after its push ({_headline(verdict)}); "
            f"fix-forward run {child.id} is healing it"
        )
        outcome = Outcome(RunState.FAILED, DEPLOY_BROKEN_CLASS, error)
        return Decision(DecisionKind.FIX_FORWARD, outcome, child_run_id=child.id)

    def _fix_forward_child(self, scope: RunScope, run: Run, sha: str, verdict: Verdict) -> Run:
        """The run's fix-forward, queued once even if this watch is repeated after a crash."""
        existing = [r for r in self.store.children(run.id) if r.kind == "fix_forward"]
        if existing:
            return existing[0]
        repo = scope.repo
        options = EnqueueOptions(
            kind="fix_forward",
            priority=FIX_FORWARD_PRIORITY,
            parent_id=run.id,
            max_attempts=self.settings.scheduler.max_attempts,
            timeout_s=repo.run_timeout_s or self.settings.scheduler.run_timeout_s,
            requested_by="afk-pipeline",
        )
        child = self.store.enqueue(repo.name, options).run
        self.store.record_event(
            child.id,
            "evidence",
            f"deploy of {sha[:12]} broken: fix forward",
            {
                "prompt": self._fix_prompt(scope, sha, verdict, run.pushed_sha),
                "broken_sha": sha,
                "broken_by": BROKEN_BY_CI if _headline(verdict) == "CI failed" else "deploy",
                "ci_log": verdict.log_hint,
            },
        )
        return child

    def _frozen(
        self, scope: RunScope, run: Run, sha: str, verdict: Verdict, fix_forwards: int
    ) -> Decision:
        reason = (
            f"deploy of {sha[:12]} still broken after {fix_forwards} fix-forward run(s) "
            f"(run {run.id})"
        )
        self.freeze(scope.repo.name, reason, run.id)
        scope.events("recovery", f"repo {scope.repo.name} frozen: {reason}", {"frozen": True})
        exc = EscalationError(
            FROZEN_REASON,
            f"{reason}.\nLast evidence:\n{mask(verdict.evidence)[-EVIDENCE_CHARS:]}\n"
            f"{_ci_log(verdict.log_hint)}"
            f"The repo's queue is stopped and nothing was reverted; fix "
            f"{scope.repo.default_branch} by hand, then unfreeze the repo.",
        )
        return self.escalate(scope, run, exc, {"broken_sha": sha, "frozen": True})

    def _fix_prompt(self, scope: RunScope, sha: str, verdict: Verdict, pushed: str | None) -> str:
        shown, diff = "The commit that broke it", self._diff(scope, sha)
        if verdict.judged and pushed and pushed != sha:  # judged by a later commit, after a cancel
            shown = f"The pushed commit, whose own CI was cancelled, then {sha[:12]}"
            diff = f"{self._diff(scope, pushed)}\n{diff}"
        return (
            f"Fix-forward: commit {sha} on {scope.repo.default_branch} is broken after its push "
            f"({_headline(verdict)}).\n"
            "Do not revert it blindly: find the cause and fix it forward, test first.\n\n"
            "Failure evidence (CI log tail or probe output):\n"
            f"{mask(verdict.evidence)[-EVIDENCE_CHARS:]}"
            f"\n{_ci_log(verdict.log_hint)}"
            f"\n\n{shown}:\n{diff}"
        )

    def _diff(self, scope: RunScope, sha: str) -> str:
        if scope.workspace is None:
            return f"(see `git show {sha}`)"
        try:
            text = GitRunner(GitRepo.mirror(scope.ws.mirror)).ok(
                "show", "--no-ext-diff", "--no-textconv", "--stat", "--patch", "-U3", sha
            )
        except PipelineError as exc:
            text = f"(git show {sha} failed: {exc})"
        return text[:DIFF_CHARS]

    # Escalation -----------------------------------------------------------------

    def escalate_unless_healed(
        self,
        scope: RunScope,
        run: Run,
        exc: EscalationError,
        rewatch: Callable[[str], Decision],
    ) -> Decision:
        """``escalate``, unless a fix-forward that found nothing to change was called for a
        red CI that is green now (a flaky check re-run): then the broken commit is watched
        again (``rewatch``), and a healthy verdict ends the chain healed, not frozen."""
        broken = self._green_again(scope, run) if exc.reason == "no_change" else None
        if broken is None:
            return self.escalate(scope, run, exc)
        scope.events(
            "recovery",
            f"nothing to change, and the CI of {broken[:12]} is green now (re-run): "
            "watching it again instead of freezing the repo",
            {"broken_sha": broken},
        )
        return rewatch(broken)

    def _green_again(self, scope: RunScope, run: Run) -> str | None:
        """The commit a fix-forward was queued for, if CI broke it and is green on it now."""
        if run.kind != "fix_forward":
            return None
        noted = [e.data for e in self.store.run_events(run.id) if e.kind == "evidence"]
        if not noted or noted[0].get("broken_by") != BROKEN_BY_CI:
            return None
        sha = str(noted[0].get("broken_sha") or "")
        tracker = self.lifecycle.trackers.get(scope.repo.tracker)
        try:
            source = ci_source(scope.repo.ci, tracker=tracker, slug=scope.repo.slug)
            state = source.state(sha) if sha else None
        except PipelineError as exc:
            scope.events("recovery", f"could not read the CI of {sha[:12]} again: {exc}")
            return None
        return sha if state is not None and state.state == "success" else None

    def escalate(
        self,
        scope: RunScope,
        run: Run,
        exc: EscalationError,
        extra: Mapping[str, object] | None = None,
    ) -> Decision:
        """Keep the evidence and record the escalation; the run's ending tells the human.

        A fix-forward that could not heal the deploy freezes the repo: the next
        queued issue must not ship on top of a deploy known to be broken.
        """
        frozen = exc.reason == FROZEN_REASON
        log_line = self._parent_ci_log(run) if run.kind == "fix_forward" and not frozen else ""
        if log_line:  # the human called after a fix-forward sees what it was shown
            exc = EscalationError(exc.reason, f"{exc}\n{log_line}".rstrip())
        if run.kind == "fix_forward" and not frozen:
            self.freeze(scope.repo.name, f"fix-forward run {run.id} ended {exc.reason}", run.id)
            frozen = True
        message = str(exc)
        if scope.lease is not None:
            kept = scope.lease.keep(
                run_id=run.id,
                reason=f"{exc.reason}: {exc}",
                head_sha=run.pushed_sha or run.head_sha,
                extra=dict(extra or {}),
            )
            scope.events("kept", f"worktree kept in {kept}", {"path": str(kept), "frozen": frozen})
            checkpoint("kept", run.id)  # kept, the ending not yet recorded
            message += f"\nThe run's worktree is kept in {kept}"
        self.store.add_escalation(scope.repo.name, exc.reason, message, run.id)
        kind = DecisionKind.FROZEN if frozen else DecisionKind.ESCALATED
        return Decision(kind, Outcome(RunState.ESCALATED, exc.reason, str(exc)))

    def _parent_ci_log(self, run: Run) -> str:
        """The failing CI log of the commit a fix-forward was queued for, as a line."""
        noted = [e.data for e in self.store.run_events(run.id) if e.kind == "evidence"]
        return _ci_log(str(noted[0].get("ci_log") or "")) if noted else ""

    def freeze(self, repo: str, reason: str, run_id: int) -> None:
        """Freeze ``repo`` for ``run_id``; the caller records the escalation.

        The log line is the endings pass's, which sees every freeze (a human's too).
        """
        self.store.freeze_repo(repo, reason, by=FROZEN_BY, run_id=run_id)

    def freeze_unhealed(self, run: Run) -> bool:
        """After the fact: a fix-forward that ended without healing freezes its repo.

        The worker's ending writes this freeze with the finish itself (the
        scheduler's ``freeze_policy``); this catches the endings written
        elsewhere (the sweeper, a cancel of a waiting run) and is a no-op on a
        repo frozen already. True if this call froze the repo.
        """
        freeze = unhealed_freeze(run, Outcome(RunState(run.state), run.error_class, run.error))
        if freeze is None or self.settings.repo(run.repo_name) is None:
            return False
        return self.store.freeze_repo(
            run.repo_name, freeze.reason, by=freeze.by, run_id=run.id, escalation=freeze.escalation
        )


def unhealed_freeze(run: Run, ending: Outcome) -> RepoFreeze | None:
    """The freeze ``run`` ending as ``ending`` calls for: one for a fix-forward ending
    failed or cancelled without healing, else None.

    Escalated fix-forwards were frozen by ``Recovery.escalate``; one that failed with
    ``deploy_broken`` has queued the next fix-forward of its chain; one ``superseded``
    was never needed (its broken run ended not broken, ``pipeline.run.superseded``), and
    that run's ending called the human if one was needed. The one rule for
    both the finish that ends the run and the after-the-fact ``freeze_unhealed``.
    """
    if run.kind != "fix_forward" or ending.state not in (RunState.FAILED, RunState.CANCELLED):
        return None
    if ending.error_class in (DEPLOY_BROKEN_CLASS, SUPERSEDED_CLASS):
        return None
    reason = f"fix-forward run {run.id} ended {ending.state} ({ending.error_class or 'no cause'})"
    return RepoFreeze(reason, FROZEN_BY, escalation=f"{reason}: {ending.error}")


def _headline(verdict: Verdict) -> str:
    """What broke, in a few words: CI or the deploy."""
    if verdict.evidence.startswith("CI failed"):
        return "CI failed"
    return "the deploy is broken"


def _ci_log(log_hint: str) -> str:
    """The failing CI log's address as a line of text (the CI chose it: never markup)."""
    return f"The failing CI log: {shown_url(log_hint)}\n" if log_hint else ""
