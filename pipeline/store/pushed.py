"""The run a new run of an issue continues when that issue's change is on the branch already.

A run that pushed and then did not succeed left its change on the default branch;
a new run of its issue (the ready label again, ``POST /api/runs``) carries the
pushed commit and only watches it, as ``retry_run`` does, instead of implementing
the issue a second time (``pipeline.intake.pushed`` tells the issue). A run that
succeeded, or whose fix-forward chain healed the deploy, closed its issue as done.
"""

from __future__ import annotations

from typing import Protocol

from pipeline.core.states import RETRYABLE_TERMINAL, RunState
from pipeline.store.records import Run, RunFilter

# How deep a chain of fix-forwards is followed to see whether it healed.
MAX_CHAIN = 20


class PushedRuns(Protocol):
    def list_runs(self, flt: RunFilter | None = None) -> list[Run]: ...

    def children(self, run_id: int) -> list[Run]: ...


def pushed_run(store: PushedRuns, issue_id: int) -> Run | None:
    """The issue's latest run if it pushed a change that was never judged healthy."""
    last = store.list_runs(RunFilter(issue_id=issue_id, limit=1))
    if not last or last[0].kind != "issue" or not last[0].pushed_sha:
        return None
    run = last[0]
    if run.state not in RETRYABLE_TERMINAL or _healed(store, run):
        return None
    return run


def _healed(store: PushedRuns, run: Run) -> bool:
    """True when a fix-forward of ``run``'s chain succeeded (and resolved its issue)."""
    parents = [run.id]
    for _ in range(MAX_CHAIN):
        if not parents:
            return False
        children = [c for p in parents for c in store.children(p) if c.kind == "fix_forward"]
        if any(c.state == RunState.SUCCEEDED for c in children):
            return True
        parents = [c.id for c in children]
    return False
