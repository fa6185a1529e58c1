"""Run scopes for tests that drive one phase (implement, publish, conflicts) directly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.agents.base import Agent
from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.git.repo import GitRepo
from pipeline.run.budget import SpendLedger
from pipeline.run.prompt import IssueInfo
from pipeline.run.scope import RunScope
from pipeline.sandbox.jail import Jail
from pipeline.workspace.workspaces import PreparedWorkspace

PLACEHOLDER_ISSUE = IssueInfo(
    ref="#1",
    number=1,
    title="A change",
    body="",
    comments=(),
    url="https://forge.invalid/1",
    author="alice",
)


@dataclass(frozen=True)
class TreeSpec:
    """A plain git tree standing in for a prepared worktree (no slot, no mirror)."""

    root: Path
    tree: GitRepo
    env: Mapping[str, str]
    home: Path
    base_sha: str = ""
    branch: str = "main"

    def workspace(self, repo: RepoSettings) -> PreparedWorkspace:
        return PreparedWorkspace(
            repo=repo.name,
            path=self.root,
            workdir=self.root,
            branch=self.branch,
            base_sha=self.base_sha,
            env=dict(self.env),
            setup_s=0.0,
            strategy="worktree",
            git=self.tree,
            mirror=self.root,
            jail=Jail.unconfined(self.root, self.env, self.home),
        )


def scope_for(
    run_id: int,
    repo: RepoSettings,
    workspace: PreparedWorkspace,
    events: EventSink,
    agent: Agent | None = None,
    issue: IssueInfo = PLACEHOLDER_ISSUE,
) -> RunScope:
    """A run's scope over ``workspace``; without ``agent`` an agent call fails the test."""

    def no_agent() -> Agent:
        if agent is None:
            raise FatalError("test", "this test's run has no agent")
        return agent

    return RunScope(
        run_id=run_id,
        repo=repo,
        issue=issue,
        events=events,
        stop=None,
        ledger=SpendLedger(repo),
        agent=no_agent,
        workspace=workspace,
    )
