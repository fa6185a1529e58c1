"""The run's vocabulary, defined once: states, outcomes, verdicts, decisions.

Every module that names a run state, reads a watch verdict, acts on a
recovery decision or writes the ``Afk-Run`` trailer imports it from here, so
the list of states (the store's partial indexes, the API's enum, the
dashboard's filter) cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RunState(StrEnum):
    """Where a run is. Values are what the store, the API and the CLI show."""

    QUEUED = "queued"
    RETRY_WAIT = "retry_wait"
    PREPARING = "preparing"
    IMPLEMENTING = "implementing"
    TESTING = "testing"
    PUBLISHING = "publishing"
    WATCHING = "watching"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ESCALATED = "escalated"
    CANCELLED = "cancelled"


WAITING_STATES: tuple[str, ...] = (RunState.QUEUED, RunState.RETRY_WAIT)
BUSY_STATES: tuple[str, ...] = (
    RunState.PREPARING,
    RunState.IMPLEMENTING,
    RunState.TESTING,
    RunState.PUBLISHING,
    RunState.WATCHING,
)
TERMINAL_STATES: tuple[str, ...] = (
    RunState.SUCCEEDED,
    RunState.FAILED,
    RunState.ESCALATED,
    RunState.CANCELLED,
)
ALL_STATES: tuple[str, ...] = WAITING_STATES + BUSY_STATES + TERMINAL_STATES
# Endings a person may queue again with ``pipeline runs retry``.
RETRYABLE_TERMINAL: tuple[str, ...] = (RunState.FAILED, RunState.ESCALATED, RunState.CANCELLED)

# The error class of a run stopped by its execution time limit: distinct from
# ``cancelled``, which only a person (or the API) asks for.
TIMEOUT_CLASS = "timeout"
# The error class of a run whose push broke the deploy; its fix-forward child heals it.
DEPLOY_BROKEN_CLASS = "deploy_broken"
# The error class of a fix-forward ended without an agent because its broken run's final
# verdict was not "broken" (watched again after a crash: inconclusive, or ended otherwise).
SUPERSEDED_CLASS = "superseded"
# The escalation reason of a run whose repo was frozen.
FROZEN_REASON = "frozen"
# Escalations a human can answer on the issue: re-adding the ready label resumes the agent.
RESUMABLE_REASONS = frozenset({"blocked", "tests_red"})

# Every commit a run adds carries ``Afk-Run: <run id>`` (ADR 0007).
TRAILER = "Afk-Run"
# A fix-forward run goes ahead of every issue run of its repo (DESIGN.md).
FIX_FORWARD_PRIORITY = 1_000_000


class VerdictState(StrEnum):
    """What the watch concluded about a pushed SHA."""

    HEALTHY = "healthy"
    BROKEN = "broken"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Verdict:
    """The watch's conclusion for one pushed SHA."""

    state: VerdictState
    evidence: str
    ci: str
    deploy: str
    log_hint: str = ""  # where the failing CI log is, as CI reported it (not to trust)
    # The commit whose CI failed when not the pushed one: a later commit of the default
    # branch holding it, judged because the pushed commit's own CI was cancelled.
    judged: str = ""


class DecisionKind(StrEnum):
    """What recovery decided after the watch (or after an escalation)."""

    RESOLVED = "resolved"
    FIX_FORWARD = "fix_forward"
    FROZEN = "frozen"
    ESCALATED = "escalated"


@dataclass(frozen=True)
class Outcome:
    """How a run ends, as a value the worker writes: state and, if not a success, why."""

    state: RunState
    error_class: str | None = None
    error: str | None = None
    summary: str | None = None


@dataclass(frozen=True)
class Decision:
    """Recovery's decision for one run; ``outcome`` is what the flow hands the worker."""

    kind: DecisionKind
    outcome: Outcome
    child_run_id: int | None = None  # the fix-forward queued, for ``FIX_FORWARD``

    @property
    def needs_human(self) -> bool:
        return self.kind in (DecisionKind.FROZEN, DecisionKind.ESCALATED)


# A repo is active (its queue runs) or frozen (nothing starts until a human unfreezes it).
REPO_STATES = ("active", "frozen")
# A run works on an issue (or a manual enqueue) or fixes a broken deploy forward.
RUN_KINDS = ("issue", "fix_forward")
