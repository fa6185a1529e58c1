"""A rebase conflict handed to the agent (``repo.push.conflict_agent_attempts`` times).

Publish aborts a conflicting rebase before it calls the resolver, so the run
branch is as the implement phase left it: one trailered commit on the old
base, clean, with ``origin/<default>`` already fetched. The agent (its session
resumed when the run has one) is asked to rebase onto ``origin/<default>``
itself, resolve, and leave the branch rebased. The pipeline then checks what
it left: no rebase or merge in progress, the run branch checked out, HEAD
descending from ``origin/<default>``, the run's work as one commit carrying
``Afk-Run`` and ``Refs`` (squashed again as implement does when it is not),
and the test gate green. Only then is the answer True. Anything else puts
the branch back where it was and answers False, so publish escalates
``conflict`` with nothing lost. Agent errors are classified as in implement,
after the branch is put back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.agents.base import AgentRequest, AgentResult, classify_result
from pipeline.config.settings import RepoSettings
from pipeline.core.errors import CancelRequested, EscalationError
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken
from pipeline.core.states import TRAILER
from pipeline.git.commits import Git
from pipeline.run.prompt import IssueInfo
from pipeline.run.scope import RunScope

__all__ = ["ConflictResolver", "conflict_prompt", "resolve_conflict_with_agent"]

_IN_PROGRESS = ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD")
_IDENTITY_VARS = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
)


@dataclass
class ConflictResolver:
    """Everything the agent needs to resolve one run's conflict; publish calls it.

    ``test_gate`` runs the repo's tests in the worktree and says whether they
    are green. ``retest`` is the same gate for publish's re-test, skipped when
    the resolution was just verified green on the very same HEAD.
    """

    scope: RunScope
    test_gate: Callable[[], bool]
    resume_session: str | None = None
    green_head: str | None = field(default=None, init=False)

    @property
    def run_id(self) -> int:
        return self.scope.run_id

    @property
    def repo(self) -> RepoSettings:
        return self.scope.repo

    @property
    def issue(self) -> IssueInfo:
        return self.scope.issue

    @property
    def branch(self) -> str:
        return self.scope.ws.branch

    @property
    def events(self) -> EventSink:
        return self.scope.events

    @property
    def stop(self) -> StopToken | None:
        return self.scope.stop

    @property
    def trailers(self) -> tuple[tuple[str, str], ...]:
        return ((TRAILER, str(self.run_id)), ("Refs", self.issue.url))

    @property
    def subject(self) -> str:
        return f"{self.issue.title} ({self.issue.ref})"

    def __call__(self, description: str) -> bool:
        return resolve_conflict_with_agent(description, self)

    def retest(self) -> bool:
        """The test gate, unless it was green on this HEAD right after the resolution."""
        head = Git(self.scope.tree, stop=self.stop).head()
        if head == self.green_head:
            self.events(
                "test",
                f"tests already green on {head[:12]} after the conflict resolution; not run again",
            )
            return True
        return self.test_gate()


def conflict_prompt(description: str, resolver: ConflictResolver) -> str:
    """What the agent is asked to do (the issue again when it has no session)."""
    default = resolver.repo.default_branch
    issue = resolver.issue
    context = (
        ""
        if resolver.resume_session
        else (
            f"# The issue: {issue.title} ({issue.ref})\n\n"
            f"{issue.body.strip() or '(no description)'}"
            "\n\n"
        )
    )
    return (
        f"{context}Your change for issue {issue.ref} is ready, but origin/{default} moved "
        f"meanwhile and the change no longer applies on top of it.\n\n{description}\n\n"
        f"The rebase was aborted: branch `{resolver.branch}` is as you left it and "
        f"origin/{default} is already fetched (do not fetch, pull or push).\n\n"
        f"1. Run `git rebase origin/{default}`.\n"
        f"2. Resolve every conflict so that both changes are kept: the new work on "
        f"origin/{default} and what the issue asks for. `git add` the files and run "
        "`git rebase --continue` until the rebase is done (GIT_EDITOR is `true`, so the "
        "commit message is kept).\n"
        "3. The commit message must still end with these two trailers:\n\n"
        f"{TRAILER}: {resolver.run_id}\nRefs: {issue.url}\n\n"
        f"4. Run the whole test suite ({resolver.repo.test_command or 'the project tests'}) "
        "and keep it green.\n\n"
        f"Leave `{resolver.branch}` checked out and rebased, with no rebase in progress. "
        "If you cannot resolve the conflict, run `git rebase --abort` and print one line "
        "`BLOCKED: <reason>`."
    )


def resolve_conflict_with_agent(description: str, resolver: ConflictResolver) -> bool:
    """Hand the conflict to the agent; True only for a verified, green resolution.

    Raises what ``classify_result`` raises for a failed agent invocation, and
    ``CancelRequested`` when stopped, with the branch put back first.
    """
    git = Git(resolver.scope.tree, stop=resolver.stop)
    target = git.run(
        "rev-parse", "--verify", f"refs/remotes/origin/{resolver.repo.default_branch}^{{commit}}"
    ).strip()
    original = git.head()
    untracked = git.untracked()  # test artefacts and such: never the agent's to commit
    budget = resolver.scope.ledger.remaining()
    if budget is not None and budget <= 0:
        resolver.events(
            "agent", "the run's budget is spent; the conflict is not handed to the agent"
        )
        return False
    try:
        problem = _attempt(resolver, git, description, target, untracked)
    except BaseException:
        _restore(resolver, git, original)
        raise
    if problem is not None:
        resolver.events("agent", f"the conflict is not resolved: {problem}", {"problem": problem})
        _restore(resolver, git, original)
        return False
    resolver.green_head = git.head()
    resolver.events(
        "agent",
        f"the agent resolved the conflict: {resolver.branch} is "
        f"{resolver.green_head[:12]} on origin/{resolver.repo.default_branch} "
        f"at {target[:12]}, tests green",
        {"head": resolver.green_head},
    )
    return True


def _attempt(
    resolver: ConflictResolver, git: Git, description: str, target: str, untracked: set[str]
) -> str | None:
    """One agent attempt at the conflict: what is still wrong afterwards, or None."""
    result = _invoke(resolver, git, conflict_prompt(description, resolver))
    if result.blocked_reason:
        return f"the agent is blocked: {result.blocked_reason}"
    return _verify(resolver, git, target, untracked)


def _invoke(resolver: ConflictResolver, git: Git, prompt: str) -> AgentResult:
    if resolver.stop is not None and resolver.stop.stopped:
        raise CancelRequested(f"stopped before the agent ran: {resolver.stop.reason}")
    scope = resolver.scope
    budget = scope.ledger.remaining()
    env = {**scope.ws.env, "GIT_EDITOR": "true", **scope.git_identity()}
    resolver.events(
        "agent",
        "rebase conflict handed to the agent",
        {"resumed": resolver.resume_session is not None},
    )
    extra = {key: env[key] for key in ("GIT_EDITOR", *_IDENTITY_VARS) if key in env}
    request = AgentRequest(
        prompt,
        scope.workdir,
        env,
        scope.home,
        resolver.resume_session,
        budget,
        jail=scope.jail,
        extra_env=extra,
    )
    agent = scope.agent()
    result = agent.run(request, events=resolver.events, stop=resolver.stop)
    scope.ledger.add(result)
    for lock in git.clear_stale_locks(resolver.branch):  # a git of the agent killed mid-way
        resolver.events("agent", f"removed {lock.name}, left behind by a git of the agent")
    classify_result(agent.name, result, budget)
    return result


def _verify(resolver: ConflictResolver, git: Git, target: str, untracked: set[str]) -> str | None:
    """What is wrong with the branch the agent left, or None when it is resolved."""
    busy = [name for name in _IN_PROGRESS if _git_path(git, name).exists()]
    if busy:
        return f"git still has an operation in progress ({', '.join(busy)})"
    current = git.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    if current != resolver.branch:
        return f"HEAD is on {current or 'a detached commit'}, not on {resolver.branch}"
    if git.stage_changes(untracked, resolver.repo.keep_dirs):
        git.commit(git.with_trailers(resolver.subject, resolver.trailers))
    if not _contains(git, target):
        return f"{resolver.branch} does not contain origin/{resolver.repo.default_branch}"
    try:
        commits = git.squash(target, resolver.subject, resolver.trailers)
    except EscalationError:
        return "the run's change is gone: nothing differs from the remote"
    if not all(git.has_trailers(git.message(sha), resolver.trailers) for sha in commits):
        return "the run's commit lost its Afk-Run/Refs trailers"
    if not resolver.test_gate():
        return "the tests are red on the resolved branch"
    return None


def _contains(git: Git, commit: str) -> bool:
    """True when ``commit`` is HEAD or one of its ancestors."""
    return git.run("rev-list", "-n1", commit, "^HEAD").strip() == ""


def _git_path(git: Git, name: str) -> Path:
    """Where a per-worktree state file lives: the daemon's path, not one git is told."""
    return git.tree.git_dir / name


def _restore(resolver: ConflictResolver, git: Git, original: str) -> None:
    """Put the branch back as it was before the agent touched it."""
    for operation in ("rebase", "merge", "cherry-pick"):
        git.run(operation, "--abort", check=False)
    left = git.run("rev-parse", "HEAD", check=False).strip()
    git.run("checkout", "-q", "-f", resolver.branch, check=False)
    git.run("reset", "-q", "--hard", original)
    excludes = [arg for directory in resolver.repo.keep_dirs for arg in ("-e", directory)]
    git.run("clean", "-fdq", *excludes, check=False)
    if left and left != original:
        resolver.events(
            "agent",
            f"{resolver.branch} put back at {original[:12]}; the agent's attempt was {left[:12]}",
            {"attempt": left},
        )
