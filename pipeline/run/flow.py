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
from pathlib import Path

from pipeline.agents import Agent, AgentResult
from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import EscalationError, FatalError
from pipeline.core.events import EventSink
from pipeline.core.faults import checkpoint
from pipeline.core.masking import mask
from pipeline.intake.issue_text import Snapshot, trusted_issue
from pipeline.queue.worker import RunContext
from pipeline.run.conflicts import ConflictResolver
from pipeline.run.implement import ImplementOutcome, IssueInfo, implement, run_test_gate
from pipeline.run.lifecycle import Lifecycle
from pipeline.run.publish import find_pushed, publish
from pipeline.run.recovery import Recovery, Verdict
from pipeline.sandbox.jail import Jail
from pipeline.store import Run, Store
from pipeline.trackers.base import Tracker
from pipeline.watch.ci import ci_source, watch_ci
from pipeline.watch.deploy import watch_deploy
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

log = logging.getLogger(__name__)


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


class RunFlow:
    """The run pipeline: ``flow(ctx)`` returns ``None`` on success or raises classified."""

    def __init__(self, deps: FlowDeps) -> None:
        self.deps = deps

    def __call__(self, ctx: RunContext) -> str | None:
        run = ctx.run
        repo = self.deps.settings.repo(run.repo_name)
        if repo is None:
            raise FatalError("missing_repo", f"repo {run.repo_name!r} is no longer in the config")
        issue = self._issue_info(run, repo, ctx.events)
        checkpoint("preparing", run.id)
        if run.kind == "issue":
            self.deps.lifecycle.claimed(run, repo, ctx.events)
        if run.pushed_sha:
            ctx.events("publish", f"already pushed {run.pushed_sha[:12]}; watching again")
            return self._watch_and_decide(ctx, repo, None, run.pushed_sha)
        ws = self.deps.workspaces.prepare(
            repo,
            run_id=run.id,
            issue_ref=issue.ref,
            base_env=self.deps.base_env,
            events=ctx.events,
            stop=ctx.stop,
        )
        ctx.update(
            base_sha=ws.base_sha, branch=ws.branch, worktree=str(ws.path), setup_s=ws.setup_s
        )
        try:
            sha = self._implement_and_publish(ctx, repo, ws, issue)
        except EscalationError as exc:
            self.deps.recovery.escalate(ctx, repo, ws, exc)
            raise
        except BaseException:
            self.deps.workspaces.release(ws, succeeded=False)
            raise
        return self._watch_and_decide(ctx, repo, ws, sha)

    def _implement_and_publish(
        self, ctx: RunContext, repo: RepoSettings, ws: PreparedWorkspace, issue: IssueInfo
    ) -> str:
        run = ctx.run
        found = find_pushed(ws.mirror, f"refs/heads/{repo.default_branch}", run.id)
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
        tally = _AgentTally(ctx)
        outcome = implement(
            run_id=run.id,
            issue=issue,
            repo=repo,
            agent=self.deps.agent_factory(repo),
            workdir=ws.workdir,
            repo_root=ws.path,
            tree=ws.git,
            env=ws.env,
            home=self._home(ws),
            events=ctx.events,
            stop=ctx.stop,
            extra_prompt=self._evidence(run),
            on_agent_result=tally,
            on_phase=lambda phase: self._phase(ctx, phase),
            jail=ws.jail,
        )
        ctx.update(head_sha=outcome.head_sha)  # spend is recorded per invocation by the tally
        ctx.set_state("publishing")
        checkpoint("publishing", run.id)
        resolver = self._conflict_resolver(ctx, repo, ws, issue, outcome, tally)
        result = publish(
            run_id=run.id,
            repo=repo,
            tree=ws.git,
            mirror=ws.mirror,
            branch=ws.branch,
            base_sha=ws.base_sha,
            events=ctx.events,
            stop=ctx.stop,
            retest=resolver.retest,
            resolve_conflict=resolver,
            record_pushed=lambda sha: self._record_push(ctx, sha),
            open_pr=self._pull_request_opener(run, repo, issue),
            title=f"{issue.title} ({issue.ref})",
            limits=self.deps.workspaces.git_limits,
        )
        return result.pushed_sha

    def _conflict_resolver(
        self,
        ctx: RunContext,
        repo: RepoSettings,
        ws: PreparedWorkspace,
        issue: IssueInfo,
        outcome: ImplementOutcome,
        tally: _AgentTally,
    ) -> ConflictResolver:
        """The agent publish hands a rebase conflict to (its session resumed), and the gate."""
        jail = self._jail(ws)
        return ConflictResolver(
            run_id=ctx.run.id,
            issue=issue,
            repo=repo,
            agent=self.deps.agent_factory(repo),
            tree=ws.git,
            workdir=ws.workdir,
            branch=ws.branch,
            env=ws.env,
            home=self._home(ws),
            events=ctx.events,
            stop=ctx.stop,
            test_gate=lambda: run_test_gate(repo, ws.workdir, jail, ctx.events, ctx.stop).ok,
            resume_session=outcome.agent.session_id,
            spent_usd=outcome.cost_usd,
            on_agent_result=tally,
            jail=jail,
        )

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

    def _watch_and_decide(
        self, ctx: RunContext, repo: RepoSettings, ws: PreparedWorkspace | None, sha: str
    ) -> str | None:
        ctx.set_state("watching")
        checkpoint("watching", ctx.run.id)
        try:
            verdict = self._watch(ctx, repo, sha)
        except BaseException:
            # Cancelled, lease lost or a CI error mid-watch: decide never runs,
            # so give the worktree back here or its warm slot stays busy for good.
            if ws is not None:
                self.deps.workspaces.release(ws, succeeded=False)
            raise
        return self.deps.recovery.decide(ctx, repo, ws, sha, verdict)

    def _watch(self, ctx: RunContext, repo: RepoSettings, sha: str) -> Verdict:
        tracker = self.deps.trackers.get(repo.tracker)
        source = ci_source(repo.ci, tracker=tracker, slug=repo.slug)
        ci = watch_ci(source, sha, repo.ci, ctx.events, ctx.stop)
        ctx.check()  # a stop (cancel, lost lease, timeout) ended the watch early
        if ci.state == "failure":
            return Verdict("broken", f"CI failed for {sha[:12]}: {ci.detail}", ci.detail, "-")
        if ci.inconclusive and repo.ci.kind != "none":
            return Verdict("inconclusive", f"CI: {ci.detail}", ci.detail, "not watched")
        ci_text = "no CI configured" if repo.ci.kind == "none" else f"green ({ci.detail})"
        if not repo.deploy.probes:
            return Verdict("healthy", "no deploy probes configured", ci_text, "not configured")
        deploy = watch_deploy(repo.deploy, sha, ctx.events, ctx.stop)
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

    def _issue_info(self, run: Run, repo: RepoSettings, events: EventSink) -> IssueInfo:
        """The issue as the agent may see it: trusted text only (``pipeline.intake.issue_text``)."""
        if run.kind == "fix_forward" or run.issue_number is None:
            root = self.deps.recovery.chain_root(run)
            title = f"Fix forward: the deploy of run {run.parent_id} is broken"
            ref = f"fix-{run.id}"
            body = f"Heal the broken deploy of {repo.name} (chain started by run {root.id})."
            return IssueInfo(
                ref=ref,
                number=root.issue_number or 0,
                title=title,
                body=body,
                comments=(),
                url=root.issue_url or "",
                author="afk-pipeline",
            )
        tracker = self.deps.trackers[repo.tracker]
        detail = tracker.get_issue(repo.slug, run.issue_number)
        record = self.deps.store.get_issue(run.issue_id) if run.issue_id else None
        tracker_settings = self.deps.settings.tracker(repo.tracker)
        if tracker_settings is None:
            raise FatalError("missing_tracker", f"tracker {repo.tracker!r} is not in the config")
        text = trusted_issue(tracker, tracker_settings, repo.slug, detail, Snapshot.of(record))
        events("trust", text.message, text.data)
        return IssueInfo(
            ref=f"#{detail.number}",
            number=detail.number,
            title=text.title,
            body=text.body,
            comments=text.comments,
            url=detail.url,
            author=detail.author,
            untrusted_comments=text.quoted,
        )

    def _evidence(self, run: Run) -> str | None:
        if run.kind != "fix_forward":
            return None
        return self.deps.recovery.evidence_for(run)

    def _home(self, ws: PreparedWorkspace) -> Path:
        return self._jail(ws).home

    @staticmethod
    def _jail(ws: PreparedWorkspace) -> Jail:
        if ws.jail is None:
            raise FatalError(
                "sandbox",
                f"the workspace of {ws.repo} was prepared without a "
                "sandbox; the daemon never runs agents unconfined by accident",
            )
        return ws.jail


class _AgentTally:
    """Records each agent invocation on the run as it ends, totals included.

    Recording per invocation (not only at the end) keeps the spend of a run
    that escalates on its budget or is retried visible in the history.
    """

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cost_usd = ctx.run.cost_usd
        self.tokens_in = ctx.run.tokens_in
        self.tokens_out = ctx.run.tokens_out
        self.turns = ctx.run.num_turns

    def __call__(self, result: AgentResult) -> None:
        self.cost_usd += result.cost_usd
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.turns += result.num_turns
        fields: dict[str, object] = {
            "num_turns": self.turns,
            "cost_usd": self.cost_usd,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }
        if result.session_id:
            fields["agent_session"] = result.session_id
        self.ctx.update(**fields)
