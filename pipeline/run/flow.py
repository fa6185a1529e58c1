"""One run from claim to verdict: prepare, implement, publish, watch, recover.

This is the callable the scheduler runs for each claimed run. It holds no
database lock; every write goes through the ``RunContext`` and is fenced on
the run's lease. A retried run never pushes twice: a recorded ``pushed_sha``
skips straight to watching, and before implementing again the remote is
searched for a commit carrying this run's ``Afk-Run`` trailer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pipeline.agents import Agent
from pipeline.config.repo_file import REPO_FILE
from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import CancelRequested, EscalationError, FatalError, LeaseLost
from pipeline.core.events import EventSink
from pipeline.core.faults import checkpoint
from pipeline.core.masking import mask
from pipeline.core.states import Decision, Outcome, RunState, Verdict, VerdictState
from pipeline.intake.issue_text import Snapshot, trusted_issue
from pipeline.intake.lifecycle import VIA_LABEL, Lifecycle
from pipeline.intake.sanitize import inert_quote
from pipeline.queue.worker import RunContext
from pipeline.run.budget import Spend, SpendLedger
from pipeline.run.conflicts import ConflictResolver
from pipeline.run.implement import ImplementOutcome, IssueInfo, implement, run_test_gate
from pipeline.run.progress import (
    CommentSlot,
    ProgressComment,
    ProgressView,
    outcome_text,
    progress_after_error,
)
from pipeline.run.progress_final import ProgressFinals
from pipeline.run.publish import PublishHooks, PublishOptions, find_pushed, publish
from pipeline.run.publish_rules import pull_request_title
from pipeline.run.recovery import Recovery
from pipeline.run.resume import ResumeDeps, ResumePlan, resume_plan
from pipeline.run.scope import RunScope, WorktreeLease
from pipeline.run.withdrawn import STARTING, IssueGuard, watching
from pipeline.store import Run, Store
from pipeline.trackers.base import Tracker
from pipeline.watch.ci import CiWatchAids, ci_source, watch_ci
from pipeline.watch.deploy import DescendantVersions, default_probe_runner, watch_deploy
from pipeline.workspace.repo_settings import repo_settings
from pipeline.workspace.setup import run_setup
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Start:
    """What a run starts from, read once as it is claimed."""

    issue: IssueInfo
    resume: ResumePlan | None
    guard: IssueGuard | None  # None for fix-forward runs and runs that already pushed


@dataclass(frozen=True)
class FlowDeps:
    """Everything a run needs, built once by the daemon."""

    settings: Settings
    store: Store
    trackers: Mapping[str, Tracker]
    lifecycle: Lifecycle
    workspaces: Workspaces
    recovery: Recovery
    agent_factory: Callable[[RepoSettings], Agent]
    base_env: Mapping[str, str]
    finals: ProgressFinals | None = None  # who sees each progress comment to its end


class RunFlow:
    """The run pipeline: ``flow(ctx)`` returns the run's ``Outcome`` or raises classified."""

    def __init__(self, deps: FlowDeps) -> None:
        self.deps = deps

    def __call__(self, ctx: RunContext) -> Outcome:
        run = ctx.run
        repo = self.deps.settings.repo(run.repo_name)
        if repo is None:
            raise FatalError("missing_repo", f"repo {run.repo_name!r} is no longer in the config")
        start = self._start(ctx, repo)
        checkpoint("preparing", run.id)
        if run.kind == "issue":
            self.deps.lifecycle.claimed(run, repo, ctx.events)
        progress = self._progress(ctx, repo)
        try:
            outcome = self._ended(ctx, repo, start)
        except BaseException as exc:
            if progress is not None:
                last = ctx.run.failures + 1 >= ctx.run.max_attempts
                progress_after_error(progress, exc, ctx.stop.reason, last)
            raise
        if progress is not None:
            progress.close(outcome.state, outcome_text(outcome))
        return outcome

    def _ended(self, ctx: RunContext, repo: RepoSettings, start: _Start) -> Outcome:
        """The run's outcome; a cancel asked for while the run was ending, before it pushed,
        beats any ending but success (the heartbeat that would have stopped it came too late)."""
        try:
            outcome = self._run(ctx, repo, start)
        except Exception as exc:
            self._cancel_wins(ctx, exc)
            raise
        if outcome.state != RunState.SUCCEEDED:
            self._cancel_wins(ctx, None)
        return outcome

    def _cancel_wins(self, ctx: RunContext, cause: Exception | None) -> None:
        """Raise ``CancelRequested`` if a person asked to cancel the run and it has not pushed."""
        if isinstance(cause, CancelRequested | LeaseLost):
            return
        if ctx.stop.stopped and ctx.stop.reason != "cancelled":
            return  # a timeout, a shutdown: the stop's own reason decides (write_outcome)
        try:
            current = self.deps.store.get_run(ctx.run.id)
        except Exception:
            return  # the ending as it is; a cancel the heartbeat never saw stays unseen
        if current is not None and current.cancel_requested and not current.pushed_sha:
            ctx.events("cancel", "cancel seen as the run ended; it ends cancelled")
            raise CancelRequested("the run was cancelled") from cause

    def _progress(self, ctx: RunContext, repo: RepoSettings) -> ProgressComment | None:
        """The run's progress comment on its issue, following the run's timeline."""
        run = ctx.run
        if run.kind != "issue" or run.issue_number is None:
            return None
        public = self.deps.settings.http.public_url
        link = f"{public.rstrip('/')}/runs/{run.id}" if public else f"`pipeline runs show {run.id}`"
        view = ProgressView(run.id, link)
        for event in self.deps.store.run_events(run.id):  # a restarted run shows its past too
            view.apply(event.kind, event.message, event.data)
        view.apply("state", run.state, {"state": run.state, "pushed_sha": run.pushed_sha or ""})
        view.cost_usd = run.cost_usd
        slot = CommentSlot(
            self.deps.trackers[repo.tracker],
            (repo.slug, run.issue_number),
            run.id,
            run.progress_comment_id,
            remember=lambda comment_id: ctx.update(progress_comment_id=comment_id),
        )
        progress = ProgressComment(view, slot)
        if self.deps.finals is not None:
            self.deps.finals.follow(progress)
        ctx.observers.append(progress.observe)
        progress.start()
        return progress

    def _run(self, ctx: RunContext, repo: RepoSettings, start: _Start) -> Outcome:
        run, issue = ctx.run, start.issue
        unasked = self.deps.recovery.not_needed(run)
        if unasked is not None:  # its broken run, watched again after a crash, was not broken
            ctx.events("recovery", unasked.summary or unasked.error or "not needed")
            return unasked
        if run.pushed_sha:
            ctx.events("publish", f"already pushed {run.pushed_sha[:12]}; watching again")
            scope = self._scope(ctx, repo, issue, None)
            return self._watch_and_decide(ctx, scope, run.pushed_sha).outcome
        ws = self.deps.workspaces.prepare(
            repo,
            run_id=run.id,
            issue_ref=issue.ref,
            base_env=self.deps.base_env,
            events=ctx.events,
            stop=ctx.stop,
        )
        # The first attempt's base is kept: a push of this run can only come after it.
        run_base = run.base_sha or ws.base_sha
        ctx.update(base_sha=run_base, branch=ws.branch, worktree=str(ws.path), setup_s=ws.setup_s)
        with WorktreeLease(self.deps.workspaces, ws) as lease:
            repo = self._with_repo_file(ctx, repo, ws)
            scope = self._scope(ctx, repo, issue, lease)
            try:
                sha = self._implement_and_publish(ctx, scope, start, run_base)
            except EscalationError as exc:
                return self.deps.recovery.escalate_unless_healed(
                    scope, ctx.run, exc, lambda sha: self._watch_and_decide(ctx, scope, sha)
                ).outcome
            return self._watch_and_decide(ctx, scope, sha).outcome

    def _with_repo_file(
        self, ctx: RunContext, repo: RepoSettings, ws: PreparedWorkspace
    ) -> RepoSettings:
        """The repo as this run sees it, ``.afk.toml`` of its base commit applied.

        Bad values are skipped, and told once on the issue that tried to use them.
        """
        effective, report = repo_settings(repo, ws.mirror, ws.base_sha)
        if not report.noteworthy:
            return repo
        ctx.events("repo_file", report.message, {"applied": list(report.applied)})
        number = ctx.run.issue_number
        if report.problems and number is not None:
            lines = "\n".join(f"- `{inert_quote(problem)}`" for problem in report.problems)
            body = (
                f"The repository's `{REPO_FILE}` has values this run could not use; it went on "
                f"without them:\n\n{lines}\n\nFix them on `{repo.default_branch}`."
            )
            key = f"run={ctx.run.id}:repo-file"
            self.deps.lifecycle.comment_once(repo, number, key, body, ctx.run.id)
        if effective.setup_commands and not repo.setup_commands and ws.jail is not None:
            run_setup(effective, ws.workdir, ws.jail, ctx.events, ctx.stop)
        return effective

    def _scope(
        self, ctx: RunContext, repo: RepoSettings, issue: IssueInfo, lease: WorktreeLease | None
    ) -> RunScope:
        """The run's scope, built once: what every phase after preparing shares."""
        run = ctx.run
        spent = Spend(run.cost_usd, run.tokens_in, run.tokens_out, run.num_turns)
        return RunScope(
            run_id=run.id,
            repo=repo,
            issue=issue,
            events=ctx.events,
            stop=ctx.stop,
            ledger=SpendLedger(repo, spent, record=lambda fields: ctx.update(**fields)),
            agent=lambda: self.deps.agent_factory(repo),
            workspace=lease.ws if lease is not None else None,
            lease=lease,
            on_phase=lambda phase: self._phase(ctx, phase),
        )

    def _implement_and_publish(
        self, ctx: RunContext, scope: RunScope, start: _Start, run_base: str
    ) -> str:
        run, repo = ctx.run, scope.repo
        found = find_pushed(scope.ws.mirror, f"refs/heads/{repo.default_branch}", run.id, run_base)
        if found:
            ctx.events(
                "publish",
                f"found this run's commit {found[:12]} on the remote; "
                "recording it instead of implementing again",
            )
            ctx.update(pushed_sha=found)
            return found
        ctx.set_state("implementing")
        checkpoint("implementing", run.id)
        with watching(start.guard, ctx.stop):
            outcome = implement(scope, self._evidence(run), start.resume)
        ctx.update(head_sha=outcome.head_sha)  # spend is recorded per invocation by the ledger
        ctx.set_state("publishing")
        checkpoint("publishing", run.id)
        return self._publish(ctx, scope, outcome, run_base, start.guard)

    def _publish(
        self,
        ctx: RunContext,
        scope: RunScope,
        outcome: ImplementOutcome,
        run_base: str,
        guard: IssueGuard | None,
    ) -> str:
        """Publish, a rebase conflict handed to the agent (its session resumed)."""

        def test_gate() -> bool:
            return run_test_gate(scope.repo, scope.workdir, scope.jail, ctx.events, ctx.stop).ok

        resolver = ConflictResolver(scope, test_gate, resume_session=outcome.agent.session_id)
        hooks = PublishHooks(
            retest=resolver.retest,
            record_pushed=lambda sha: self._record_push(ctx, sha),
            resolve_conflict=resolver,
            open_pr=self._pull_request_opener(ctx.run, scope.repo, scope.issue),
            before_push=guard.before_push if guard is not None else None,
        )
        options = PublishOptions(
            title=pull_request_title(scope.issue.title, scope.issue.ref),
            limits=self.deps.workspaces.git_limits,
            run_base=run_base,
        )
        return publish(scope, hooks, options).pushed_sha

    def _pull_request_opener(
        self, run: Run, repo: RepoSettings, issue: IssueInfo
    ) -> Callable[[str, str], str | None] | None:
        """In push mode ``branch``, how publish opens the pull request for the pushed branch."""
        if repo.push.mode != "branch":
            return None
        tracker = self.deps.trackers[repo.tracker]
        closes = f"Closes {issue.ref}.\n\n" if run.kind != "fix_forward" else ""
        body = f"{closes}Published by afk-pipeline run {run.id}."

        def open_pr(branch: str, title: str) -> str:
            # The title is the agent's commit subject: masked like any text leaving the daemon.
            return tracker.open_pull_request(
                repo.slug, branch, repo.default_branch, mask(title), body
            )

        return open_pr

    def _watch_and_decide(self, ctx: RunContext, scope: RunScope, sha: str) -> Decision:
        ctx.set_state("watching")
        checkpoint("watching", ctx.run.id)
        verdict = self._watch(ctx, scope.repo, sha)
        ctx.events(
            "verdict",
            f"{verdict.state}: CI {verdict.ci}; deploy {verdict.deploy}",
            {"state": str(verdict.state), "ci": verdict.ci, "deploy": verdict.deploy},
        )
        return self.deps.recovery.decide(scope, ctx.run, sha, verdict)

    def _watch(self, ctx: RunContext, repo: RepoSettings, sha: str) -> Verdict:
        source = ci_source(repo.ci, tracker=self.deps.trackers.get(repo.tracker), slug=repo.slug)
        mirror = self.deps.workspaces.mirror(repo)
        later = CiWatchAids(later=lambda judged: mirror.later_head(judged, ctx.stop))
        ci = watch_ci(source, sha, repo.ci, ctx.events, ctx.stop, later)
        ctx.check()  # a stop (cancel, lost lease, timeout) ended the watch early
        if ci.state == "failure":
            evidence = f"CI failed for {(ci.judged or sha)[:12]}: {ci.detail}"
            return Verdict(VerdictState.BROKEN, evidence, ci.summary, "-", ci.log_hint, ci.judged)
        if ci.inconclusive and repo.ci.kind != "none":
            return Verdict(VerdictState.INCONCLUSIVE, f"CI: {ci.detail}", ci.summary, "not watched")
        ci_text = "no CI configured" if repo.ci.kind == "none" else f"green ({ci.summary})"
        if not repo.deploy.probes:
            return Verdict(
                VerdictState.HEALTHY, "no deploy probes configured", ci_text, "not configured"
            )
        holds = DescendantVersions(lambda version: mirror.holds(version, sha, ctx.stop))
        runner = default_probe_runner(stop=ctx.stop, holds=holds)
        deploy = watch_deploy(repo.deploy, sha, ctx.events, ctx.stop, probe_runner=runner)
        ctx.check()  # a stopped deploy watch is no verdict: a probe killed by it did not fail
        deploy_text = f"{deploy.verdict} after {deploy.measurements} measurement(s)"
        return Verdict(deploy.verdict, deploy.evidence, ci_text, deploy_text)

    @staticmethod
    def _phase(ctx: RunContext, phase: str) -> None:
        if ctx.run.state != phase:
            ctx.set_state(phase)
            checkpoint(phase, ctx.run.id)

    @staticmethod
    def _record_push(ctx: RunContext, sha: str) -> None:
        checkpoint("after_push", ctx.run.id)  # pushed, not yet recorded: the worst moment
        ctx.update(pushed_sha=sha)

    def _start(self, ctx: RunContext, repo: RepoSettings) -> _Start:
        """What the run starts from: its issue, how it resumes, and the guard that ends it
        if a human withdraws the issue (``pipeline.run.withdrawn``), checked here first."""
        run = ctx.run
        if run.kind == "fix_forward" or run.issue_number is None:
            return _Start(self.deps.recovery.fix_forward_issue(run, repo), None, None)
        guard = None
        if not run.pushed_sha:  # pushed already: only the watch is left
            queued = self.deps.store.run_events(run.id, limit=1)
            by_label = bool(queued) and queued[0].data.get("via") == VIA_LABEL
            cfg = self.deps.settings.tracker(repo.tracker)
            every = (cfg.poll_interval_s if cfg else None) or self.deps.settings.poll_interval_s
            where = (repo, run.issue_number)
            guard = IssueGuard(self.deps.lifecycle, where, by_label, ctx.events, every)
        issue, resume = self._issue_info(run, repo, ctx.events, guard)
        return _Start(issue, resume, guard)

    def _issue_info(
        self, run: Run, repo: RepoSettings, events: EventSink, guard: IssueGuard | None
    ) -> tuple[IssueInfo, ResumePlan | None]:
        """The issue as the agent may see it: trusted text only (``pipeline.intake.issue_text``),
        and, for a run that answers an escalated one, how it resumes (``pipeline.run.resume``)."""
        assert run.issue_number is not None  # _start gives fix-forward runs their own
        tracker = self.deps.trackers[repo.tracker]
        detail = tracker.get_issue(repo.slug, run.issue_number)
        if guard is not None and not run.head_sha:  # head_sha: it may have pushed before a crash
            guard.check(detail, STARTING)
        record = self.deps.store.get_issue(run.issue_id) if run.issue_id else None
        tracker_settings = self.deps.settings.tracker(repo.tracker)
        if tracker_settings is None:
            raise FatalError("missing_tracker", f"tracker {repo.tracker!r} is not in the config")
        text = trusted_issue(tracker, tracker_settings, repo.slug, detail, Snapshot.of(record))
        events("trust", text.message, text.data)
        deps = ResumeDeps(self.deps.store, tracker, self.deps.lifecycle, events)
        info = IssueInfo(
            ref=f"#{detail.number}",
            number=detail.number,
            title=text.title,
            body=text.body,
            comments=text.comments,
            url=detail.url,
            author=detail.author,
            untrusted_comments=text.quoted,
        )
        return info, resume_plan(deps, run, repo, detail)

    def _evidence(self, run: Run) -> str | None:
        if run.kind != "fix_forward":
            return None
        return self.deps.recovery.evidence_for(run)
