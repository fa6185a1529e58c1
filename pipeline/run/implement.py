"""One run's implement phase: prompt, agent, test gate loop, commit.

1. The agent gets the issue prompt (see ``pipeline.run.prompt``).
2. ``BLOCKED:`` or no change at all escalates with the agent's words.
3. Uncommitted changes are committed by the pipeline.
4. The test gate runs ``test_command``; while it is red, the same session is
   resumed with the failing output, up to ``max_fix_iterations`` times; still
   red escalates (nothing is pushed).
5. The run's commits become one commit on top of the base: the agent's
   message (or ``<title> (<ref>)``) with the trailers ``Afk-Run: <run id>``
   and ``Refs: <issue url>``. Squashing makes "every commit carries both
   trailers" hold whatever the agent did, and gives publish one commit to
   rebase. A single agent commit that already carries both is kept as is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.agents.base import (
    Agent,
    AgentRequest,
    AgentResult,
    classify_result,
    summarise,
)
from pipeline.config.settings import RepoSettings
from pipeline.core.errors import CancelRequested, EscalationError
from pipeline.core.events import EventSink
from pipeline.core.proc import CommandResult, StopToken, shell_argv
from pipeline.git.commits import Git
from pipeline.git.repo import GitRepo
from pipeline.run.prompt import IssueInfo, build_prompt, fix_prompt
from pipeline.sandbox.jail import Jail

__all__ = ["ImplementOutcome", "IssueInfo", "implement", "run_test_gate"]

TESTS_TAIL_CHARS = 4_000


@dataclass(frozen=True)
class ImplementOutcome:
    """What the implement phase produced: one commit ready to publish."""

    head_sha: str
    commits: tuple[str, ...]
    fix_iterations: int
    agent: AgentResult  # the last invocation
    tests_output_tail: str
    cost_usd: float = 0.0  # every invocation of the run together
    tokens_in: int = 0
    tokens_out: int = 0


def run_test_gate(
    repo: RepoSettings,
    workdir: Path,
    jail: Jail,
    events: EventSink,
    stop: StopToken | None,
) -> CommandResult:
    """Run the repo's ``test_command`` in ``workdir``, confined, with its timeout."""
    if not repo.test_command:
        events("test", "no test_command configured; the gate passes")
        return CommandResult(returncode=0, output_tail="", duration_s=0.0)
    result = jail.run(
        shell_argv(repo.test_command),
        cwd=workdir,
        env=jail.environment(),
        events=events,
        timeout_s=repo.test_timeout_s,
        stop=stop,
    )
    if result.stopped is not None:
        raise CancelRequested(f"tests stopped: {result.stopped}")
    verdict = "passed" if result.ok else _red_reason(result, repo.test_timeout_s)
    events(
        "test",
        f"tests {verdict} in {result.duration_s:.1f}s",
        {
            "returncode": result.returncode,
            "duration_s": round(result.duration_s, 3),
            "timed_out": result.timed_out,
            "ok": result.ok,
        },
    )
    return result


def _red_reason(result: CommandResult, timeout_s: float) -> str:
    if result.timed_out:
        return f"timed out after {timeout_s:g}s"
    return f"failed (exit {result.returncode})"


@dataclass
class _Run:
    """The state of one implement phase, so each step stays short."""

    run_id: int
    issue: IssueInfo
    repo: RepoSettings
    agent: Agent
    workdir: Path
    env: Mapping[str, str]
    home: Path
    events: EventSink
    stop: StopToken | None
    git: Git
    base: str
    on_agent_result: Callable[[AgentResult], None] | None
    jail: Jail
    on_phase: Callable[[str], None] | None = None
    first_prompt: str = ""
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0

    def phase(self, name: str) -> None:
        """Tell the caller the run moved between ``implementing`` and ``testing``."""
        if self.on_phase is not None:
            self.on_phase(name)

    @property
    def trailers(self) -> tuple[tuple[str, str], ...]:
        return (("Afk-Run", str(self.run_id)), ("Refs", self.issue.url))

    @property
    def subject(self) -> str:
        return f"{self.issue.title} ({self.issue.ref})"

    def invoke(self, prompt: str, resume: str | None) -> AgentResult:
        if self.stop is not None and self.stop.stopped:
            raise CancelRequested(f"stopped before the agent ran: {self.stop.reason}")
        request = AgentRequest(
            prompt,
            self.workdir,
            self.env,
            self.home,
            resume,
            self._remaining_budget(),
            jail=self.jail,
        )
        untracked_before = self.git.untracked()
        result = self.agent.run(request, events=self.events, stop=self.stop)
        self.cost_usd += result.cost_usd
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        if self.on_agent_result is not None:
            self.on_agent_result(result)
        self._check_budget()
        classify_result(self.agent.name, result, request.max_budget_usd)
        if result.blocked_reason:
            raise EscalationError("blocked", f"the agent is blocked: {result.blocked_reason}")
        self.commit_pending(untracked_before)
        return result

    def _remaining_budget(self) -> float | None:
        if self.repo.max_budget_usd is None:
            return None
        remaining = self.repo.max_budget_usd - self.cost_usd
        if remaining <= 0:
            self._check_budget(force=True)
        return remaining

    def _check_budget(self, force: bool = False) -> None:
        budget = self.repo.max_budget_usd
        if budget is not None and (force or self.cost_usd > budget):
            raise EscalationError(
                "budget",
                f"the run spent ${self.cost_usd:.4f} of its ${budget:.4f} budget "
                f"(repos.{self.repo.name}.max_budget_usd)",
            )

    def commit_pending(self, untracked_before: set[str]) -> None:
        if self.git.stage_changes(untracked_before, self.repo.keep_dirs):
            sha = self.git.commit(self.git.with_trailers(self.subject, self.trailers))
            self.events("agent", f"committed the agent's uncommitted changes as {sha[:12]}")

    def check_changed(self, result: AgentResult) -> None:
        if self.git.head() == self.base:
            raise EscalationError(
                "no_change",
                "the agent finished without changing anything: "
                f"{summarise(result.result_text, 400) or '(no message)'}",
            )

    def fix_request(self, result: AgentResult, gate: CommandResult, iteration: int) -> str:
        text = fix_prompt(
            test_command=self.repo.test_command or "",
            output_tail=gate.output_tail,
            iteration=iteration,
            max_iterations=self.repo.max_fix_iterations,
        )
        # A session-less agent (a plain command) needs the whole context again.
        return text if result.session_id else f"{self.first_prompt}\n\n{text}"


def implement(
    *,
    run_id: int,
    issue: IssueInfo,
    repo: RepoSettings,
    agent: Agent,
    workdir: Path,
    repo_root: Path,
    tree: GitRepo,
    env: Mapping[str, str],
    home: Path,
    events: EventSink,
    stop: StopToken | None,
    extra_prompt: str | None = None,
    on_agent_result: Callable[[AgentResult], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    jail: Jail | None = None,
) -> ImplementOutcome:
    """Run the agent until the tests are green and one trailered commit is ready.

    Raises ``EscalationError`` (``blocked``, ``no_change``, ``tests_red``,
    ``budget``, ``max_turns``), ``RetryableError``, ``FatalError`` or
    ``CancelRequested`` as classified.
    """
    git = Git(tree, stop=stop)
    jail = jail or Jail.unconfined(workdir, env, home)
    run = _Run(
        run_id,
        issue,
        repo,
        agent,
        workdir,
        env,
        home,
        events,
        stop,
        git,
        git.head(),
        on_agent_result,
        jail,
        on_phase,
    )
    run.first_prompt = build_prompt(
        issue,
        run_id=run_id,
        repo=repo,
        repo_root=repo_root,
        workdir=workdir,
        extra_prompt=extra_prompt,
    )
    result = run.invoke(run.first_prompt, None)
    run.check_changed(result)
    result, gate, iterations = _gate_loop(run, result)
    commits = git.squash(run.base, run.subject, run.trailers)
    run.events("agent", f"implemented in {len(commits)} commit(s), head {commits[-1][:12]}")
    return ImplementOutcome(
        head_sha=commits[-1],
        commits=commits,
        fix_iterations=iterations,
        agent=result,
        tests_output_tail=gate.output_tail[-TESTS_TAIL_CHARS:],
        cost_usd=run.cost_usd,
        tokens_in=run.tokens_in,
        tokens_out=run.tokens_out,
    )


def _gate_loop(run: _Run, result: AgentResult) -> tuple[AgentResult, CommandResult, int]:
    """Test, and feed red output back to the same session, within the bound."""
    iterations = 0
    while True:
        run.phase("testing")
        gate = run_test_gate(run.repo, run.workdir, run.jail, run.events, run.stop)
        if gate.ok:
            return result, gate, iterations
        if iterations >= run.repo.max_fix_iterations:
            raise EscalationError(
                "tests_red",
                f"the tests are still red after {iterations} fix attempt(s); nothing was "
                f"pushed. End of the output:\n{gate.output_tail[-1500:]}",
            )
        iterations += 1
        run.events("agent", f"tests red: fix attempt {iterations} of {run.repo.max_fix_iterations}")
        run.phase("implementing")
        result = run.invoke(run.fix_request(result, gate, iterations), result.session_id)
