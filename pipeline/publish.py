"""Publish a run's commits: fetch, rebase onto the remote, re-test, push.

Idempotent across crashes: every run commit carries an ``Afk-Run: <id>``
trailer, and before anything is pushed the remote's recent history is searched
for it. A daemon killed between the push and recording the SHA finds its own
commit on restart and records it instead of pushing again (ADR 0007).

Nothing is ever lost: a conflict or a red re-test escalates with the run's
branch and commits left as they are in the worktree. Only plain pushes go to
the default branch; ``--force-with-lease`` is used only on the run's own
``afk/...`` branch in push mode ``branch``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.commits import Git
from pipeline.errors import CancelRequested, EscalationError, FatalError, RetryableError
from pipeline.events import EventSink
from pipeline.gitcred import credential_env, scrub
from pipeline.proc import CommandResult, StopToken, run_command
from pipeline.settings import PushSettings, RepoSettings

TRAILER = "Afk-Run"
SEARCH_DEPTH = 200
GIT_TIMEOUT_S = 300.0
_AUTH_FAILURE = re.compile(
    r"Authentication failed|Permission denied \(publickey|could not read (Username|Password)|"
    r"The requested URL returned error: 40[13]|Host key verification failed"
)


@dataclass(frozen=True)
class PublishResult:
    pushed_sha: str
    branch: str  # the remote branch the SHA is on
    already_on_remote: bool  # found by its trailer; nothing was pushed this time
    rebased: bool
    retested: bool
    race_retries: int
    pr_url: str | None = None  # push mode ``branch`` only


def git_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the daemon's own git commands: no prompts, parseable output."""
    env = dict(os.environ if base is None else base)
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_EDITOR="true", GIT_SEQUENCE_EDITOR="true")
    return env


def _git(root: Path, env: Mapping[str, str], *args: str, stop: StopToken | None = None,
         timeout_s: float = GIT_TIMEOUT_S) -> CommandResult:
    return run_command(["git", *args], cwd=root, env=env, timeout_s=timeout_s, stop=stop,
                       tail_lines=5000)


def find_pushed(
    repo_root: Path, remote_ref: str, run_id: int, env: Mapping[str, str]
) -> str | None:
    """The newest commit on ``remote_ref`` whose ``Afk-Run`` trailer is ``run_id``, if any.

    Only the last ``SEARCH_DEPTH`` commits are searched: a run's push is
    recent by construction. A missing ref means nothing was pushed.
    """
    fmt = f"%H%x09%(trailers:key={TRAILER},valueonly,separator=%x2C)"
    result = _git(repo_root, env, "log", f"-n{SEARCH_DEPTH}", f"--format={fmt}", remote_ref, "--")
    if not result.ok:
        return None
    wanted = str(run_id)
    for line in result.output_tail.splitlines():
        sha, _, values = line.partition("\t")
        if wanted in (value.strip() for value in values.split(",")):
            return sha.strip()
    return None


class _PushRace(Exception):
    """The remote moved under the push (non-fast-forward or a stale lease)."""


class _Publisher:
    """One publish attempt; holds the state the steps share."""

    def __init__(self, *, run_id: int, repo: RepoSettings, repo_root: Path, branch: str,
                 base_sha: str, events: EventSink, stop: StopToken | None,
                 retest: Callable[[], bool], resolve_conflict: Callable[[str], bool] | None,
                 record_pushed: Callable[[str], None],
                 open_pr: Callable[[str, str], str | None] | None,
                 remote_branch: str | None, title: str | None,
                 env: Mapping[str, str] | None) -> None:
        self.run_id, self.repo, self.root, self.branch = run_id, repo, repo_root, branch
        self.base = base_sha
        self.events, self.stop = events, stop
        self.retest, self.resolve_conflict = retest, resolve_conflict
        self.record_pushed, self.open_pr = record_pushed, open_pr
        self.remote_branch, self.title = remote_branch or branch, title
        self.env = git_env(env)
        self.push_settings: PushSettings = repo.push
        self.default = repo.default_branch
        self.rebased = self.retested = False
        self.race_retries = 0

    # -- git plumbing -------------------------------------------------------------------

    def git(self, *args: str) -> CommandResult:
        return self.checked(_git(self.root, self.env, *args, stop=self.stop))

    def checked(self, result: CommandResult) -> CommandResult:
        """Turn a git command ended by the stop token into ``CancelRequested``."""
        if result.stopped is not None:
            raise CancelRequested(f"publish of run {self.run_id} stopped: {result.stopped}")
        return result

    def git_ok(self, *args: str) -> str:
        result = self.git(*args)
        if not result.ok:
            raise FatalError("git", f"git {' '.join(args)} failed in {self.root}: "
                             f"{self._tail(result)}")
        return result.output_tail.strip()

    def git_auth(self, *args: str) -> CommandResult:
        with credential_env(self.push_settings, self.env) as env:
            return self.checked(_git(self.root, env, *args, stop=self.stop))

    def _tail(self, result: CommandResult, lines: int = 20) -> str:
        text = "\n".join(result.output_tail.splitlines()[-lines:])
        return scrub(text, self.push_settings) or f"exit {result.returncode}"

    def rev(self, ref: str) -> str:
        return self.git_ok("rev-parse", "--verify", f"{ref}^{{commit}}")

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.git("merge-base", "--is-ancestor", older, newer).returncode == 0

    def event(self, message: str, **data: object) -> None:
        self.events("publish", message, data)

    # -- steps ----------------------------------------------------------------------------

    def fetch(self) -> str:
        """Fetch the default branch into ``origin/<default>``; its SHA."""
        spec = f"+refs/heads/{self.default}:refs/remotes/origin/{self.default}"
        result = self.git_auth("fetch", "--no-tags", self.repo.remote_url, spec)
        if not result.ok:
            self.raise_if_auth(result)
            raise RetryableError("git_fetch", f"fetching {self.default} for repo "
                                 f"{self.repo.name} failed: {self._tail(result)}")
        return self.rev(f"refs/remotes/origin/{self.default}")

    def already_pushed(self, remote_ref: str) -> str | None:
        found = find_pushed(self.root, remote_ref, self.run_id, self.env)
        if found is not None:
            self.record_pushed(found)
            self.event(f"run {self.run_id} is already on {remote_ref} as {found[:12]}; "
                       "recorded it, nothing pushed", sha=found, ref=remote_ref)
        return found

    def prepare_branch(self) -> None:
        current = self.git("symbolic-ref", "--quiet", "--short", "HEAD").output_tail.strip()
        if current != self.branch:
            self.git_ok("checkout", "--quiet", self.branch)
        if self.rev("HEAD") == self.rev(self.base):
            raise FatalError("nothing_to_publish", f"run {self.run_id}: branch {self.branch} "
                             f"has no commits on top of {self.base[:12]}")
        log = self.git_ok("log", f"--format=%(trailers:key={TRAILER},valueonly)",
                          f"{self.base}..HEAD")
        if str(self.run_id) not in log.split():
            raise FatalError("missing_trailer", f"run {self.run_id}: no commit in "
                             f"{self.base[:12]}..{self.branch} carries the trailer "
                             f"'{TRAILER}: {self.run_id}'; without it a crash could push twice")

    def integrate(self) -> None:
        """Bring the branch on top of ``origin/<default>``; re-test if the base moved."""
        target = self.rev(f"refs/remotes/origin/{self.default}")
        if target == self.base:
            return
        if not self.is_ancestor(target, "HEAD"):
            self.rebase_onto(target)
        self.event(f"rebased onto origin/{self.default} at {target[:12]}",
                   old_base=self.base, new_base=target)
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
            if self.resolve_conflict is None or attempts >= allowed:
                raise EscalationError("conflict", description + self.human_steps())
            attempts += 1
            resolved = self.resolve_conflict(description)
            self.event(f"conflict handed to the agent (attempt {attempts}/{allowed}): "
                       f"{'resolved' if resolved else 'not resolved'}", resolved=resolved)
            if resolved and self.is_ancestor(target, "HEAD"):
                return
            self.git("rebase", "--abort")  # a rebase the agent left half done, if any

    def try_rebase(self, target: str) -> list[str]:
        """Rebase; [] on success, the conflicting files (rebase aborted) otherwise."""
        # Rebasing writes commits: without a configured committer (a fresh
        # container, a service account) git refuses, so use the implement phase's fallback.
        identity = Git(self.root, self.env).identity()
        result = self.git(*identity, "rebase", "--onto", target, self.base, self.branch)
        if result.ok:
            return []
        files = self.git("diff", "--name-only", "--diff-filter=U").output_tail.split()
        self.git("rebase", "--abort")
        if files:
            return files
        raise EscalationError("rebase_failed", f"run {self.run_id}: rebasing {self.branch} "
                              f"onto {target[:12]} failed: {self._tail(result)}"
                              + self.human_steps())

    def conflict_text(self, target: str, files: list[str]) -> str:
        return (f"Rebasing run {self.run_id}'s commits ({self.branch}) onto "
                f"origin/{self.default} at {target[:12]} conflicts in: {', '.join(files)}. "
                f"origin/{self.default} is already fetched; make the run's commits apply on "
                f"top of it (git rebase origin/{self.default}) and resolve the conflicts.")

    def human_steps(self) -> str:
        return (f"\nNothing was pushed. The run's commits are kept on branch {self.branch} "
                f"in {self.root}. To finish by hand: cd {self.root} && git fetch && "
                f"git rebase origin/{self.default}, resolve, run the tests and push; "
                f"or fix the remote and run `pipeline runs retry {self.run_id}`.")

    def run_retest(self) -> None:
        self.retested = True
        green = self.retest()
        self.event(f"tests after rebase: {'green' if green else 'red'}", green=green)
        if not green:
            raise EscalationError("tests_red_after_rebase",
                                  f"run {self.run_id}: the tests fail once the commits are "
                                  f"rebased onto origin/{self.default} at {self.base[:12]}."
                                  + self.human_steps())

    def push(self, refspec: str, lease: str | None = None) -> str:
        """Push HEAD; its SHA. Raises ``_PushRace`` when the remote moved under us."""
        args = ["push", "--porcelain"]
        if lease is not None:
            args.append(f"--force-with-lease={refspec.split(':', 1)[1]}:{lease}")
        result = self.git_auth(*args, self.repo.remote_url, refspec)
        if not result.ok:
            self.classify_push_failure(result)
        return self.rev("HEAD")

    def classify_push_failure(self, result: CommandResult) -> None:
        text = result.output_tail
        tail = self._tail(result)
        if re.search(r"\[rejected\].*(fetch first|non-fast-forward|stale info)", text):
            raise _PushRace(tail)
        if "[remote rejected]" in text:
            raise EscalationError("push_rejected", f"the remote refused the push of run "
                                  f"{self.run_id}: {tail}" + self.human_steps())
        self.raise_if_auth(result)
        raise RetryableError("git_push", f"push to repo {self.repo.name} failed: {tail}")

    def raise_if_auth(self, result: CommandResult) -> None:
        """A refusal for want of credentials is a configuration problem, not a retry."""
        if _AUTH_FAILURE.search(result.output_tail):
            raise FatalError("push_auth", f"repo {self.repo.name}: the remote refused git's "
                             f"credentials; check push.token / push.ssh_key_file: "
                             f"{self._tail(result)}")

    def pushed(self, sha: str, ref: str) -> None:
        self.record_pushed(sha)
        self.event(f"pushed {sha[:12]} to {ref}", sha=sha, ref=ref,
                   race_retries=self.race_retries)

    def result(self, sha: str, branch: str, *, found: bool, pr_url: str | None = None
               ) -> PublishResult:
        return PublishResult(sha, branch, found, self.rebased, self.retested,
                             self.race_retries, pr_url)

    # -- modes ----------------------------------------------------------------------------

    def to_default_branch(self) -> PublishResult:
        for attempt in range(self.push_settings.max_race_retries + 1):
            if attempt:
                self.race_retries += 1
                self.fetch()
                found = self.already_pushed(f"refs/remotes/origin/{self.default}")
                if found is not None:
                    return self.result(found, self.default, found=True)
                self.integrate()
            try:
                sha = self.push(f"HEAD:refs/heads/{self.default}")
            except _PushRace as race:
                self.event(f"push raced with another push (attempt {attempt + 1})",
                           detail=str(race)[-500:])
                continue
            self.pushed(sha, self.default)
            self.git("update-ref", f"refs/remotes/origin/{self.default}", sha)
            return self.result(sha, self.default, found=False)
        raise RetryableError("push_race", f"run {self.run_id}: the push to {self.default} "
                             f"lost the race {self.race_retries + 1} times; will retry later")

    def to_run_branch(self) -> PublishResult:
        remote = self.remote_branch
        if remote == self.default:
            raise FatalError("push_mode", f"push mode 'branch' would push to the default "
                             f"branch {self.default}; the run branch must differ")
        for _attempt in range(self.push_settings.max_race_retries + 1):
            lease = self.remote_branch_sha(remote)
            try:
                sha = self.push(f"HEAD:refs/heads/{remote}", lease=lease)
            except _PushRace:
                self.race_retries += 1
                continue
            self.pushed(sha, remote)
            return self.result(sha, remote, found=False, pr_url=self.pr(remote))
        raise RetryableError("push_race", f"run {self.run_id}: branch {remote} kept moving")

    def remote_branch_sha(self, remote: str) -> str:
        """The remote branch's SHA, fetched into ``origin/<remote>``; "" when it is absent."""
        listing = self.git_auth("ls-remote", self.repo.remote_url, f"refs/heads/{remote}")
        if not listing.ok:
            raise RetryableError("git_fetch", f"ls-remote failed: {self._tail(listing)}")
        sha = listing.output_tail.split("\t", 1)[0].strip() if listing.output_tail else ""
        if sha:
            self.git_auth("fetch", "--no-tags", self.repo.remote_url,
                          f"+refs/heads/{remote}:refs/remotes/origin/{remote}")
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
        found = self.already_pushed(f"refs/remotes/origin/{self.default}")
        if found is not None:
            return self.result(found, self.default, found=True)
        if self.push_settings.mode == "branch" and self.remote_branch_sha(self.remote_branch):
            found = self.already_pushed(f"refs/remotes/origin/{self.remote_branch}")
            if found is not None:
                return self.result(found, self.remote_branch, found=True,
                                   pr_url=self.pr(self.remote_branch))
        self.prepare_branch()
        self.integrate()
        if self.push_settings.mode == "branch":
            return self.to_run_branch()
        return self.to_default_branch()


def publish(*, run_id: int, repo: RepoSettings, repo_root: Path, branch: str, base_sha: str,
            events: EventSink, stop: StopToken | None, retest: Callable[[], bool],
            resolve_conflict: Callable[[str], bool] | None,
            record_pushed: Callable[[str], None],
            open_pr: Callable[[str, str], str | None] | None = None,
            remote_branch: str | None = None, title: str | None = None,
            env: Mapping[str, str] | None = None) -> PublishResult:
    """Publish run ``run_id``'s commits on ``branch`` (built on ``base_sha``).

    ``record_pushed`` is called with the SHA right after a push succeeds (or
    when an earlier push of this run is found), before anything else.
    ``remote_branch`` names the branch pushed in mode ``branch`` (default:
    ``branch``); ``title`` the pull request title (default: the head subject).
    """
    return _Publisher(
        run_id=run_id, repo=repo, repo_root=repo_root, branch=branch, base_sha=base_sha,
        events=events, stop=stop, retest=retest, resolve_conflict=resolve_conflict,
        record_pushed=record_pushed, open_pr=open_pr, remote_branch=remote_branch,
        title=title, env=env,
    ).run()
