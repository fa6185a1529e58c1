"""One run's scope: what implement, conflicts, publish and recovery share, built once.

``RunScope`` holds the run's repo settings, the issue as the agent may see
it, the worktree lease, the agent, the spend ledger and the event sink; each
phase takes the scope instead of re-threading a dozen values. The worktree is
a ``WorktreeLease``: a context manager that gives the tree back exactly once
when the run's scope closes (kept as evidence, released clean after a
success, or released with its branch kept after anything else).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from pipeline.agents.base import Agent
from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken
from pipeline.git.commits import Git
from pipeline.git.repo import GitRepo
from pipeline.git.run import FALLBACK_EMAIL, FALLBACK_NAME
from pipeline.run.budget import SpendLedger
from pipeline.run.prompt import IssueInfo
from pipeline.sandbox.jail import Jail
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

Ending = Literal["open", "succeeded", "failed", "kept"]


class WorktreeLease:
    """The run's worktree, given back in one place: when the ``with`` block ends."""

    def __init__(self, workspaces: Workspaces, ws: PreparedWorkspace) -> None:
        self.workspaces = workspaces
        self.ws = ws
        self.ending: Ending = "open"
        self.kept: Path | None = None

    def __enter__(self) -> WorktreeLease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def succeeded(self) -> None:
        """Release now, as a success (the run's branch is deleted); a no-op once settled."""
        if self.ending == "open":
            self.ending = "succeeded"
            self.workspaces.release(self.ws, succeeded=True)

    def release(self) -> None:
        """Give the tree back, keeping its branch; a no-op once settled."""
        if self.ending == "open":
            self.ending = "failed"
            self.workspaces.release(self.ws, succeeded=False)

    def keep(
        self, *, run_id: int, reason: str, head_sha: str | None, extra: Mapping[str, object]
    ) -> Path:
        """Keep the tree as evidence (``<volume>/frozen/<run-id>``) instead of releasing it."""
        if self.ending != "open":
            raise FatalError("worktree", f"run {run_id}: the worktree was already {self.ending}")
        self.kept = self.workspaces.keep_evidence(
            self.ws, run_id=run_id, repo=self.ws.repo, reason=reason, head_sha=head_sha, extra=extra
        )
        self.ending = "kept"
        return self.kept


@dataclass
class RunScope:
    """Everything one run's phases share; built once per run by the flow."""

    run_id: int
    repo: RepoSettings
    issue: IssueInfo
    events: EventSink
    stop: StopToken | None
    ledger: SpendLedger
    agent: Callable[[], Agent]
    workspace: PreparedWorkspace | None = None
    lease: WorktreeLease | None = None  # how the flow gives ``workspace`` back
    on_phase: Callable[[str], None] | None = None

    @property
    def ws(self) -> PreparedWorkspace:
        """The run's prepared worktree (a run that only watches again has none)."""
        if self.workspace is None:
            raise FatalError("worktree", f"run {self.run_id} has no worktree in this attempt")
        return self.workspace

    @property
    def tree(self) -> GitRepo:
        return self.ws.git

    @property
    def workdir(self) -> Path:
        return self.ws.workdir

    @property
    def jail(self) -> Jail:
        """The sandbox the agent and the tests run in; never unconfined by accident."""
        ws = self.ws
        if ws.jail is None:
            raise FatalError(
                "sandbox",
                f"the workspace of {ws.repo} was prepared without a "
                "sandbox; the daemon never runs agents unconfined by accident",
            )
        return ws.jail

    @property
    def home(self) -> Path:
        return self.jail.home

    def git_identity(self) -> dict[str, str]:
        """Git's fallback identity for the agent, when its sandbox gives it none.

        The prompt asks the agent to commit, and a rebase needs a committer, but the
        agent's HOME is private: the daemon's own ``~/.gitconfig`` is not there. The
        host's ``GIT_COMMITTER_EMAIL``/``EMAIL`` or a ``user.email`` in the repo's or the
        system's config win; the daemon rewrites the commits anyway. The agent's own
        ``~/.gitconfig`` is never read: it is the agent's to write (a FIFO it includes
        would hang the daemon's git, a file it names would be read unconfined).
        """
        env = self.jail.environment()
        if "GIT_COMMITTER_EMAIL" in env or "EMAIL" in env:
            return {}
        if not Git(self.tree, global_config=False).identity():
            return {}
        return {
            "GIT_AUTHOR_NAME": FALLBACK_NAME,
            "GIT_AUTHOR_EMAIL": FALLBACK_EMAIL,
            "GIT_COMMITTER_NAME": FALLBACK_NAME,
            "GIT_COMMITTER_EMAIL": FALLBACK_EMAIL,
        }

    def phase(self, name: str) -> None:
        """Tell the caller the run moved between ``implementing`` and ``testing``."""
        if self.on_phase is not None:
            self.on_phase(name)
