"""CI as GitHub Actions (or Woodpecker) reports it, for the ship-and-watch e2e tests.

``CiFeeder`` watches bare remotes and, for each commit that lands on ``main``,
adds a ``build`` check run on the fake GitHub (and no commit status, as in an
Actions-only repo), queued -> in progress -> completed on the test's plan; or,
with ``WoodpeckerBoard``, a push pipeline on the fake Woodpecker, pending ->
running -> its final ``StatusValue``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline.testing.forges import FakeGitHub
from pipeline.testing.gitrepos import git
from pipeline.testing.woodpecker import FakeWoodpecker


@dataclass
class CheckPlan:
    """How CI reports on one commit: how long it stays pending, and its conclusion."""

    pending_s: float = 0.0
    conclusion: str = "success"
    silent: bool = False  # CI never reports on the commit (a broken CI setup)


class Board(Protocol):
    """Where CI reports: ``status`` is ``queued``, ``in_progress`` or ``completed``, and a
    completed report's ``conclusion`` is in the CI's own words."""

    def report(self, slug: str, sha: str, status: str, conclusion: str | None) -> None: ...

    def finish(self, slug: str, sha: str, status: str, conclusion: str | None) -> None:
        """Move ``sha``'s unfinished report on."""


class GitHubChecks:
    """A ``build`` check run per commit on the fake GitHub (conclusions are GitHub's)."""

    def __init__(self, fake: FakeGitHub) -> None:
        self.fake = fake

    def report(self, slug: str, sha: str, status: str, conclusion: str | None) -> None:
        self.fake.add_check_run(slug, sha, "build", status, conclusion)

    def finish(self, slug: str, sha: str, status: str, conclusion: str | None) -> None:
        with self.fake.lock:
            for run in self.fake.repos[slug].check_runs.get(sha, []):
                if run.status != "completed":
                    run.status, run.conclusion = status, conclusion


# A report not completed yet, in Woodpecker's words.
WOODPECKER_STATUS = {"queued": "pending", "in_progress": "running"}


class WoodpeckerBoard:
    """A push pipeline per commit on the fake Woodpecker; a completed report's conclusion is
    a Woodpecker ``StatusValue`` (``success``, ``failure``, ``killed``, ``canceled``...)."""

    def __init__(self, fake: FakeWoodpecker, repo_ids: dict[str, str]) -> None:
        self.fake, self.repo_ids = fake, repo_ids

    def report(self, slug: str, sha: str, status: str, conclusion: str | None) -> None:
        self.fake.add(self.repo_ids[slug], sha, _woodpecker(status, conclusion))

    def finish(self, slug: str, sha: str, status: str, conclusion: str | None) -> None:
        self.fake.set_status(self.repo_ids[slug], sha, _woodpecker(status, conclusion))


def _woodpecker(status: str, conclusion: str | None) -> str:
    return WOODPECKER_STATUS.get(status) or str(conclusion)


class CiFeeder:
    """Reports CI on ``board`` for each new commit on a remote's main.

    ``plan(slug, sha, message)`` decides pending time and conclusion; pending
    commits go ``queued`` -> ``in_progress`` -> ``completed`` as Actions does.
    """

    def __init__(
        self, board: Board, remotes: dict[str, Path], plan: Callable[[str, str, str], CheckPlan]
    ) -> None:
        self.board, self.remotes, self.plan = board, remotes, plan
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ci-feeder", daemon=True)

    def start(self) -> None:
        for remote in self.remotes.values():  # the seed commit predates the run: not reported
            self.seen.update(self._commits(remote))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _commits(self, remote: Path) -> dict[str, str]:
        out = git(remote, "log", "-n", "50", "--format=%H%x09%s", "main")
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)

    def _loop(self) -> None:
        pending: list[tuple[float, str, str, CheckPlan]] = []
        while not self._stop.wait(0.1):
            self._tick(pending)

    def _tick(self, pending: list[tuple[float, str, str, CheckPlan]]) -> None:
        for slug, remote in self.remotes.items():
            try:
                commits = self._commits(remote)
            except RuntimeError:  # git failed reading the remote; look again next tick
                continue
            for sha, subject in commits.items():
                if sha not in self.seen:
                    self.seen.add(sha)
                    plan = self.plan(slug, sha, subject)
                    if not plan.silent:
                        pending.append(self._report(slug, sha, plan))
        now = time.monotonic()
        for item in [p for p in pending if p[0] <= now]:
            pending.remove(item)
            self._set(item[1], item[2], "completed", item[3].conclusion)
        for _, slug, sha, _plan in pending:
            self._set(slug, sha, "in_progress", None)

    def _report(self, slug: str, sha: str, plan: CheckPlan) -> tuple[float, str, str, CheckPlan]:
        if plan.pending_s > 0:
            self.board.report(slug, sha, "queued", None)
        else:
            self.board.report(slug, sha, "completed", plan.conclusion)
        return time.monotonic() + plan.pending_s, slug, sha, plan

    def complete(self, slug: str, sha: str, conclusion: str = "success") -> None:
        """Finish ``sha``'s pending CI now, whatever its plan said (the test decides)."""
        self._set(slug, sha, "completed", conclusion)

    def _set(self, slug: str, sha: str, status: str, conclusion: str | None) -> None:
        self.board.finish(slug, sha, status, conclusion)


def default_plan(slug: str, sha: str, subject: str) -> CheckPlan:
    return CheckPlan(conclusion="failure" if "[ci-red]" in subject else "success")
