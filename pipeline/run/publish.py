"""Publish a run's commits: fetch, rebase onto the remote, re-test, push.

Idempotent across crashes: every run commit carries an ``Afk-Run: <id>``
trailer, and before anything is pushed the remote's recent history is searched
for it. A daemon killed between the push and recording the SHA finds its own
commit on restart and records it instead of pushing again (ADR 0007).

Only the daemon's mirror talks to the remote (ADR 0010): it fetches, the run's
tree gets ``origin/<default>`` from it over a local path, the rebase and the
re-test happen in the tree with no secret around, and the mirror then fetches
the exact SHA to publish from the tree, checks its trailers and pushes it.

Nothing is ever lost: a conflict or a red re-test escalates with the run's
branch and commits left as they are in the worktree. Only plain pushes go to
the default branch; ``--force-with-lease`` is used only on the run's own
``afk/...`` branch in push mode ``branch``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.config.settings import PushSettings
from pipeline.core.errors import EscalationError, FatalError, RetryableError
from pipeline.core.states import TRAILER
from pipeline.git.commits import Git
from pipeline.git.mirror import Mirror, find_pushed
from pipeline.git.run import DEFAULT_LIMITS, GitLimits, GitResult
from pipeline.run.publish_rules import (
    Integration,
    PushFailure,
    carries_run,
    conflict_resolved,
    hand_conflict_to_agent,
    integration,
    push_failure,
)
from pipeline.run.scope import RunScope

__all__ = ["TRAILER", "PublishHooks", "PublishOptions", "PublishResult", "find_pushed", "publish"]


@dataclass(frozen=True)
class PublishResult:
    pushed_sha: str
    branch: str  # the remote branch the SHA is on
    already_on_remote: bool  # found by its trailer; nothing was pushed this time
    rebased: bool
    retested: bool
    race_retries: int
    pr_url: str | None = None  # push mode ``branch`` only


class _PushRace(Exception):
    """The remote moved under the push (non-fast-forward or a stale lease)."""


@dataclass(frozen=True)
class PublishHooks:
    """What publish calls back: the re-test, the conflict resolver, the push record, the PR."""

    retest: Callable[[], bool]
    record_pushed: Callable[[str], None]
    resolve_conflict: Callable[[str], bool] | None = None
    open_pr: Callable[[str, str], str | None] | None = None
    # Called before every push; raises to stop it (the issue was withdrawn meanwhile).
    before_push: Callable[[], None] | None = None


@dataclass(frozen=True)
class PublishOptions:
    """``remote_branch`` is pushed in mode ``branch`` (default: the run's branch);
    ``title`` titles the pull request (default: the head subject); a trailer on a commit
    reachable from ``run_base`` predates the run and is never taken for its push."""

    remote_branch: str | None = None
    title: str | None = None
    limits: GitLimits = DEFAULT_LIMITS
    run_base: str | None = None  # the run's first base (default: this attempt's)


class _Publisher:
    """One publish attempt; holds the state the steps share."""

    def __init__(self, scope: RunScope, hooks: PublishHooks, options: PublishOptions) -> None:
        ws, repo = scope.ws, scope.repo
        self.run_id, self.repo, self.tree, self.branch = scope.run_id, repo, ws.git, ws.branch
        self.mirror = Mirror(ws.mirror, repo, options.limits)
        self.root = ws.git.where
        self.base = self.head = ws.base_sha
        self.target = ws.base_sha  # the mirror's default branch, once fetched
        self.run_base = options.run_base or ws.base_sha
        self.events, self.stop = scope.events, scope.stop
        self.retest, self.resolve_conflict = hooks.retest, hooks.resolve_conflict
        self.record_pushed, self.open_pr = hooks.record_pushed, hooks.open_pr
        self.before_push = hooks.before_push
        self.remote_branch, self.title = options.remote_branch or ws.branch, options.title
        self.local = Git(ws.git, stop=scope.stop, limits=self.mirror.limits)
        self.push_settings: PushSettings = repo.push
        self.default = repo.default_branch
        self.rebased = self.retested = False
        self.race_retries = 0

    # -- git plumbing -------------------------------------------------------------------

    def git(self, *args: str) -> GitResult:
        return self.local.runner.run(*args)

    def git_ok(self, *args: str) -> str:
        result = self.git(*args)
        if not result.ok:
            raise FatalError("git", f"git {' '.join(args)} failed in {self.root}: {result.tail()}")
        return result.stdout.strip()

    def rev(self, ref: str) -> str:
        return self.git_ok("rev-parse", "--verify", f"{ref}^{{commit}}")

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.git("merge-base", "--is-ancestor", older, newer).returncode == 0

    def event(self, message: str, **data: object) -> None:
        self.events("publish", message, data)

    # -- steps ----------------------------------------------------------------------------

    def fetch(self) -> str:
        """Fetch the default branch into the mirror, then into the tree's ``origin/<default>``."""
        self.mirror.fetch(
            self.stop, f"+refs/heads/{self.default}:refs/heads/{self.default}", prune=False
        )
        target = self.mirror.sha(f"refs/heads/{self.default}")
        if target is None:
            raise FatalError(
                "git", f"repo {self.repo.name}: the remote has no branch {self.default!r}"
            )
        tracking = f"refs/remotes/origin/{self.default}"
        self.mirror.feed(self.tree, self.stop, f"+refs/heads/{self.default}:{tracking}")
        self.git_ok("update-ref", tracking, target)
        self.target = target
        return target

    def already_pushed(self, branch: str) -> str | None:
        found = self.mirror.find_pushed(f"refs/heads/{branch}", self.run_id, self.run_base)
        if found is not None:
            self.record_pushed(found)
            self.event(
                f"run {self.run_id} is already on {branch} as {found[:12]}; "
                "recorded it, nothing pushed",
                sha=found,
                ref=f"origin/{branch}",
            )
        return found

    def prepare_branch(self) -> None:
        current = self.git("symbolic-ref", "--quiet", "--short", "HEAD").stdout.strip()
        if current != self.branch:
            self.git_ok("checkout", "--quiet", self.branch)
        if self.rev("HEAD") == self.rev(self.base):
            raise FatalError(
                "nothing_to_publish",
                f"run {self.run_id}: branch {self.branch} "
                f"has no commits on top of {self.base[:12]}",
            )
        self.head = self.rev("HEAD")
        log = self.git_ok(
            "log", f"--format=%(trailers:key={TRAILER},valueonly)", f"{self.base}..HEAD"
        )
        if not carries_run(log, self.run_id):
            raise FatalError(
                "missing_trailer",
                f"run {self.run_id}: no commit in "
                f"{self.base[:12]}..{self.branch} carries the trailer "
                f"'{TRAILER}: {self.run_id}'; without it a crash could push twice",
            )

    def integrate(self) -> None:
        """Bring the branch on top of ``origin/<default>``; re-test if the base moved.

        The SHA to publish is HEAD right after the rebase: what the re-test ran on.
        """
        target = self.target
        step = integration(self.base, target, target_in_head=self.is_ancestor(target, "HEAD"))
        if step is Integration.AS_TESTED:
            return
        if step is Integration.REBASE:
            self.rebase_onto(target)
        self.head = self.rev("HEAD")
        self.event(
            f"rebased onto origin/{self.default} at {target[:12]}",
            old_base=self.base,
            new_base=target,
        )
        self.base, self.rebased = target, True
        self.run_retest()

    def rebase_onto(self, target: str) -> None:
        attempts = 0
        while True:
            conflicts = self.try_rebase(target)
            if not conflicts:
                return
            description = self.conflict_text(target, conflicts)
            self.event("rebase conflict", files=conflicts, onto=target)
            allowed = self.push_settings.conflict_agent_attempts
            resolver = self.resolve_conflict
            present = resolver is not None
            if not hand_conflict_to_agent(attempts, allowed, has_resolver=present) or not resolver:
                raise EscalationError("conflict", description + self.human_steps())
            attempts += 1
            resolved = resolver(description)
            self.event(
                f"conflict handed to the agent (attempt {attempts}/{allowed}): "
                f"{'resolved' if resolved else 'not resolved'}",
                resolved=resolved,
            )
            if conflict_resolved(resolved, target_in_head=self.is_ancestor(target, "HEAD")):
                return
            self.git("rebase", "--abort")  # a rebase the agent left half done, if any

    def try_rebase(self, target: str) -> list[str]:
        """Rebase; [] on success, the conflicting files (rebase aborted) otherwise."""
        # Rebasing writes commits: without a configured committer (a fresh
        # container, a service account) git refuses, so use the implement phase's fallback.
        identity = self.local.identity()
        result = self.git(*identity, "rebase", "--onto", target, self.base, self.branch)
        if result.ok:
            return []
        files = self.git("diff", "--name-only", "--diff-filter=U").stdout.split()
        self.git("rebase", "--abort")
        if files:
            return files
        raise EscalationError(
            "rebase_failed",
            f"run {self.run_id}: rebasing {self.branch} "
            f"onto {target[:12]} failed: {result.tail()}" + self.human_steps(),
        )

    def conflict_text(self, target: str, files: list[str]) -> str:
        return (
            f"Rebasing run {self.run_id}'s commits ({self.branch}) onto "
            f"origin/{self.default} at {target[:12]} conflicts in: {', '.join(files)}. "
            f"origin/{self.default} is already fetched; make the run's commits apply on "
            f"top of it (git rebase origin/{self.default}) and resolve the conflicts."
        )

    def human_steps(self) -> str:
        return (
            f"\nNothing was pushed. The run's commits are kept on branch {self.branch} "
            f"in {self.root}. To finish by hand: cd {self.root} && git fetch && "
            f"git rebase origin/{self.default}, resolve, run the tests and push; "
            f"or fix the remote and run `pipeline runs retry {self.run_id}`."
        )

    def run_retest(self) -> None:
        self.retested = True
        green = self.retest()
        self.event(f"tests after rebase: {'green' if green else 'red'}", green=green)
        if not green:
            raise EscalationError(
                "tests_red_after_rebase",
                f"run {self.run_id}: the tests fail once the commits are "
                f"rebased onto origin/{self.default} at {self.base[:12]}." + self.human_steps(),
            )

    def push(self, branch: str, lease: str | None = None) -> str:
        """Push the run's SHA from the mirror to ``branch``; ``_PushRace`` if the remote moved."""
        sha = self.head
        if self.before_push is not None:
            self.before_push()
        self.mirror.adopt(self.tree, sha, self.run_id, self.target, self.stop)
        args = [] if lease is None else [f"--force-with-lease=refs/heads/{branch}:{lease}"]
        # A cancel (or the run's time limit) waits for a push under way: killed, the push
        # may still land on the remote (the server goes on) unrecorded, and a retry of the
        # cancelled run would push the issue again. A lost lease or a shutdown still stops
        # it: the run goes on under its own id, which finds its pushed commit.
        shielded = self.stop.ignoring("cancelled", "timeout") if self.stop else None
        result = self.mirror.push(shielded, *args, f"{sha}:refs/heads/{branch}")
        if not result.ok:
            self.classify_push_failure(result)
        self.mirror.adopted(self.run_id, sha, branch)
        return sha

    def classify_push_failure(self, result: GitResult) -> None:
        failure, tail = push_failure(f"{result.stdout}\n{result.stderr}"), result.tail()
        if failure is PushFailure.RACE:
            raise _PushRace(tail)
        if failure is PushFailure.REJECTED:
            raise EscalationError(
                "push_rejected",
                f"the remote refused the push of run {self.run_id}: {tail}" + self.human_steps(),
            )
        raise RetryableError(
            "git_push", f"repo {self.repo.name}: {result.operation} failed: {tail}"
        )

    def pushed(self, sha: str, ref: str) -> None:
        self.record_pushed(sha)
        self.event(f"pushed {sha[:12]} to {ref}", sha=sha, ref=ref, race_retries=self.race_retries)

    def result(
        self, sha: str, branch: str, *, found: bool, pr_url: str | None = None
    ) -> PublishResult:
        return PublishResult(
            sha, branch, found, self.rebased, self.retested, self.race_retries, pr_url
        )

    # -- modes ----------------------------------------------------------------------------

    def to_default_branch(self) -> PublishResult:
        for attempt in range(self.push_settings.max_race_retries + 1):
            if attempt:
                self.race_retries += 1
                self.fetch()
                found = self.already_pushed(self.default)
                if found is not None:
                    return self.result(found, self.default, found=True)
                self.integrate()
            try:
                sha = self.push(self.default)
            except _PushRace as race:
                self.event(
                    f"push raced with another push (attempt {attempt + 1})", detail=str(race)[-500:]
                )
                continue
            self.pushed(sha, self.default)
            self.git("update-ref", f"refs/remotes/origin/{self.default}", sha)
            return self.result(sha, self.default, found=False)
        raise RetryableError(
            "push_race",
            f"run {self.run_id}: the push to {self.default} "
            f"lost the race {self.race_retries + 1} times; will retry later",
        )

    def to_run_branch(self) -> PublishResult:
        remote = self.remote_branch
        if remote == self.default:
            raise FatalError(
                "push_mode",
                f"push mode 'branch' would push to the default "
                f"branch {self.default}; the run branch must differ",
            )
        for _attempt in range(self.push_settings.max_race_retries + 1):
            lease = self.remote_branch_sha(remote)
            try:
                sha = self.push(remote, lease=lease)
            except _PushRace:
                self.race_retries += 1
                continue
            self.pushed(sha, remote)
            return self.result(sha, remote, found=False, pr_url=self.pr(remote))
        raise RetryableError("push_race", f"run {self.run_id}: branch {remote} kept moving")

    def remote_branch_sha(self, remote: str) -> str:
        """The remote branch's SHA, fetched into the mirror; "" when it is absent."""
        sha = self.mirror.ls_remote(f"refs/heads/{remote}", self.stop)
        if sha:
            self.mirror.fetch(self.stop, f"+refs/heads/{remote}:refs/heads/{remote}", prune=False)
        return sha

    def pr(self, remote: str) -> str | None:
        if self.open_pr is None:
            return None
        title = self.title or self.git_ok("log", "-1", "--format=%s", "HEAD")
        url = self.open_pr(remote, title)
        self.event(f"pull request for {remote}: {url or 'not opened'}", url=url)
        return url

    def run(self) -> PublishResult:
        self.fetch()
        found = self.already_pushed(self.default)
        if found is not None:
            return self.result(found, self.default, found=True)
        if self.push_settings.mode == "branch" and self.remote_branch_sha(self.remote_branch):
            found = self.already_pushed(self.remote_branch)
            if found is not None:
                return self.result(
                    found, self.remote_branch, found=True, pr_url=self.pr(self.remote_branch)
                )
        self.prepare_branch()
        self.integrate()
        if self.push_settings.mode == "branch":
            return self.to_run_branch()
        return self.to_default_branch()


def publish(
    scope: RunScope, hooks: PublishHooks, options: PublishOptions | None = None
) -> PublishResult:
    """Publish the run's commits on its worktree's branch (built on its base SHA).

    ``hooks.record_pushed`` is called with the SHA right after a push succeeds
    (or when an earlier push of this run is found), before anything else.
    """
    return _Publisher(scope, hooks, options or PublishOptions()).run()
