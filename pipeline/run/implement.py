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

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from pipeline.agents.base import (
    AgentRequest,
    AgentResult,
    classify_result,
    summarise,
)
from pipeline.config.settings import RepoSettings
from pipeline.core.errors import CancelRequested, EscalationError, RetryableError
from pipeline.core.events import EventSink
from pipeline.core.printable import shown_names
from pipeline.core.proc import CommandResult, StopToken, shell_argv
from pipeline.core.states import TRAILER
from pipeline.git.commits import Git
from pipeline.run.prompt import IssueInfo, build_prompt, fix_prompt, instruction_files
from pipeline.run.resume import ResumePlan
from pipeline.run.review import MAX_REVIEWS, Reviewer, changes_prompt
from pipeline.run.scope import RunScope
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
    _raise_if_not_found(repo, result)
    verdict = "passed" if result.ok else _red_reason(result, repo.test_timeout_s)
    events(
        "test",
        f"tests {verdict} in {result.duration_s:.1f}s",
        {
            "returncode": result.returncode,
            "duration_s": round(result.duration_s, 3),
            "timed_out": result.timed_out,
            "ok": result.ok,
            "counts": summarise_tests(result.output_tail),
        },
    )
    return result


ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTEST_COUNT = re.compile(r"\b(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)\b")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in", re.MULTILINE)
_UNITTEST_END = re.compile(r"^(OK|FAILED)\b(?: \((.*)\))?", re.MULTILINE)


def summarise_tests(output: str) -> str:
    """The test runner's own counts, as one phrase (pytest, unittest); "" if none found."""
    ran = _UNITTEST_RAN.findall(output)
    if ran:
        ends = _UNITTEST_END.findall(output)
        status, detail = ends[-1] if ends else ("", "")
        tail = f", {detail}" if detail else (", all passed" if status == "OK" else "")
        return f"{ran[-1]} tests{tail}"
    lines = [line for line in output.splitlines() if _PYTEST_COUNT.search(line)]
    if not lines:
        return ""
    return ", ".join(f"{n} {word}" for n, word in _PYTEST_COUNT.findall(lines[-1]))


def _raise_if_not_found(repo: RepoSettings, result: CommandResult) -> None:
    """Escalate when the shell found no ``test_command`` at all (exit 127, its first word).

    That is the sandbox's or the config's to fix, not the agent's: asking the agent to
    make such tests green only spends its budget. A script of the repo (a word with a
    ``/``) or a command the test suite itself runs stays the agent's to fix.
    """
    if result.returncode != 127:
        return
    try:
        words = shlex.split(repo.test_command or "")
    except ValueError:
        return
    first = next((w for w in words if not ENV_ASSIGNMENT.match(w)), "")
    if not first or "/" in first:
        return
    if not re.search(rf"(^|\s){re.escape(first)}: (command )?not found$", result.output_tail, re.M):
        return
    raise EscalationError(
        "test_command_missing",
        f"repos.{repo.name}.test_command: {first!r} was not found in the sandbox "
        f"(exit 127), so no test ran; install it, put its directory on PATH, or "
        f"change the command. Last output:\n{result.output_tail.strip()[-400:]}",
    )


def _red_reason(result: CommandResult, timeout_s: float) -> str:
    if result.timed_out:
        return f"timed out after {timeout_s:g}s"
    return f"failed (exit {result.returncode})"


class _Run:
    """The state of one implement phase, so each step stays short."""

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope
        self.repo = scope.repo
        self.events = scope.events
        self.stop = scope.stop
        self.agent = scope.agent()
        self.git = Git(scope.tree, stop=scope.stop)
        self.base = self.git.head()
        self.first_prompt = ""

    @property
    def trailers(self) -> tuple[tuple[str, str], ...]:
        return ((TRAILER, str(self.scope.run_id)), ("Refs", self.scope.issue.url))

    @property
    def subject(self) -> str:
        return f"{self.scope.issue.title} ({self.scope.issue.ref})"

    def invoke(self, prompt: str, resume: str | None) -> AgentResult:
        if self.stop is not None and self.stop.stopped:
            raise CancelRequested(f"stopped before the agent ran: {self.stop.reason}")
        ledger, scope = self.scope.ledger, self.scope
        budget = ledger.remaining()
        if budget is not None and budget <= 0:
            ledger.check(spent=True)
        request = AgentRequest(
            prompt,
            scope.workdir,
            scope.ws.env,
            scope.home,
            resume,
            budget,
            jail=scope.jail,
            extra_env=scope.git_identity(),  # the prompt asks it to commit
        )
        untracked_before, ignored_before = self.git.untracked(), self.git.ignored()
        result = self.agent.run(request, events=self.events, stop=self.stop)
        ledger.add(result)
        self.clear_stale_locks()
        ledger.check()
        classify_result(self.agent.name, result, request.max_budget_usd)
        if result.blocked_reason:
            raise EscalationError("blocked", f"the agent is blocked: {result.blocked_reason}")
        self.back_on_branch()
        self.commit_pending(untracked_before)
        self.drop_ignored(ignored_before)
        return result

    def drop_ignored(self, before: set[str]) -> None:
        """The gate tests what is pushed: what the agent made that git ignores goes."""
        dropped = self.git.drop_ignored(before, self.repo.keep_dirs)
        if dropped:
            self.events(
                "agent",
                f"removed {len(dropped)} path(s) the agent made that git ignores, so the "
                f"tests see what is pushed: {shown_names(dropped)}",
                {"ignored_removed": len(dropped)},
            )

    def clear_stale_locks(self) -> None:
        """A git the agent left holding a lock (killed mid-commit) must not fail the run."""
        for lock in self.git.clear_stale_locks(self.scope.ws.branch):
            self.events("agent", f"removed {lock.name}, left behind by a git of the agent")

    def back_on_branch(self) -> None:
        """The run's branch moved to where the agent left HEAD (a branch of its own, detached).

        The gate tests HEAD and publish pushes the run's branch: they must be one commit.
        """
        branch = self.scope.ws.branch
        runner = self.git.runner
        current = runner.run("symbolic-ref", "--quiet", "--short", "HEAD").stdout.strip()
        if current == branch:
            return
        self.git.run("checkout", "--quiet", "-B", branch)
        where = f"branch {current}" if current else "a detached HEAD"
        self.events("agent", f"the agent left the worktree on {where}; its work goes on {branch}")

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

    def gate(self) -> CommandResult:
        return run_test_gate(self.repo, self.scope.workdir, self.scope.jail, self.events, self.stop)


def _note_skipped_instructions(run: _Run, scope: RunScope) -> None:
    """Say on the timeline which instruction files the prompt left out, and why."""
    for skipped in instruction_files(scope.ws.path, scope.workdir)[1]:
        run.events(
            "agent",
            f"the prompt leaves out the repository's instructions: {skipped}",
            {"skipped": skipped},
        )


def implement(
    scope: RunScope, extra_prompt: str | None = None, resume: ResumePlan | None = None
) -> ImplementOutcome:
    """Run the agent until the tests are green and one trailered commit is ready.

    With a ``resume`` plan the run answers an escalated one: its agent session is
    resumed with the replies (``pipeline.run.resume``).

    Raises ``EscalationError`` (``blocked``, ``no_change``, ``tests_red``,
    ``budget``, ``max_turns``), ``RetryableError``, ``FatalError`` or
    ``CancelRequested`` as classified.
    """
    run = _Run(scope)
    run.first_prompt = build_prompt(
        scope.issue,
        run_id=scope.run_id,
        repo=scope.repo,
        repo_root=scope.ws.path,
        workdir=scope.workdir,
        extra_prompt=extra_prompt,
    )
    _note_skipped_instructions(run, scope)
    result = _first_invocation(run, resume)
    run.check_changed(result)
    result, gate, iterations = _gate_loop(run, result)
    if scope.repo.review:
        result, gate = _review_loop(run, result, gate)
    commits = run.git.squash(run.base, run.subject, run.trailers)
    run.events("agent", f"implemented in {len(commits)} commit(s), head {commits[-1][:12]}")
    spent = scope.ledger.attempt
    return ImplementOutcome(
        head_sha=commits[-1],
        commits=commits,
        fix_iterations=iterations,
        agent=result,
        tests_output_tail=gate.output_tail[-TESTS_TAIL_CHARS:],
        cost_usd=spent.cost_usd,
        tokens_in=spent.tokens_in,
        tokens_out=spent.tokens_out,
    )


def _review_loop(
    run: _Run, result: AgentResult, gate: CommandResult
) -> tuple[AgentResult, CommandResult]:
    """The reviewer reads the green change; requested changes go back to the same session."""
    reviewer = Reviewer(run.scope, run.base)
    for round_ in range(1, MAX_REVIEWS + 1):
        verdict = reviewer.review(round_)
        if verdict.approved:
            return result, gate
        if round_ == MAX_REVIEWS:
            break
        run.scope.phase("implementing")
        text = changes_prompt(verdict.reasons, round_)
        prompt = text if result.session_id else f"{run.first_prompt}\n\n{text}"
        result = run.invoke(prompt, result.session_id)
        result, gate, _ = _gate_loop(run, result)
    raise EscalationError(
        "review_rejected",
        f"the reviewer requested changes {MAX_REVIEWS} times; nothing was pushed. "
        f"Its reasons:\n{verdict.reasons}",
    )


def _first_invocation(run: _Run, resume: ResumePlan | None) -> AgentResult:
    """The issue prompt; or, answering an escalation, the earlier session resumed.

    A session the agent cannot resume (its CLI exits without a result, e.g. the
    session is gone with a wiped HOME) falls back to a fresh session whose prompt
    carries the question and the answer.
    """
    if resume is None:
        return run.invoke(run.first_prompt, None)
    run.first_prompt = f"{run.first_prompt.rstrip()}\n\n{resume.prompt_section()}"
    if not resume.session_id:
        return run.invoke(run.first_prompt, None)
    message = resume.message(run.scope.run_id, run.scope.issue.url)
    try:
        return run.invoke(message, resume.session_id)
    except RetryableError as exc:
        if exc.kind != "agent_crash":
            raise
        run.events(
            "agent",
            f"session {resume.session_id} could not be resumed ({exc}); "
            "a fresh session gets the question and the answer",
        )
        return run.invoke(run.first_prompt, None)


def _gate_loop(run: _Run, result: AgentResult) -> tuple[AgentResult, CommandResult, int]:
    """Test, and feed red output back to the same session, within the bound."""
    iterations = 0
    while True:
        run.scope.phase("testing")
        gate = run.gate()
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
        run.scope.phase("implementing")
        result = run.invoke(run.fix_request(result, gate, iterations), result.session_id)
