"""Classified errors: every failure a run can meet is one of these three kinds.

The scheduler decides what happens next from the class alone: a retryable error
goes back to the queue after a backoff, a fatal one fails the run, and an
escalation stops the run and calls a human with the reason.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Base of every error the pipeline raises on purpose."""

    error_class = "error"


class ConfigError(PipelineError):
    """A configuration problem; the message names the file and key path."""

    error_class = "config"

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class RetryableError(PipelineError):
    """A transient failure: the run goes back to the queue after a backoff.

    ``kind`` names the cause for the history (``agent_overloaded``, ``network``,
    ``forge_5xx``, ``git_fetch``, ``disk_full``, ``idle_timeout``, ...).
    """

    error_class = "retryable"

    def __init__(self, kind: str, message: str, retry_after_s: float | None = None) -> None:
        self.kind = kind
        self.retry_after_s = retry_after_s
        super().__init__(message)


class FatalError(PipelineError):
    """A failure no retry can fix (bad config, missing repo, agent refusal)."""

    error_class = "fatal"

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


class EscalationError(PipelineError):
    """The run needs a human: blocked agent, tests never green, conflict, ...

    ``reason`` is a short code; the message says what happened and what a
    human must do.
    """

    error_class = "escalated"

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class LeaseLost(PipelineError):
    """The worker's fenced write matched no row: another owner has the run."""

    error_class = "lease_lost"


class CancelRequested(PipelineError):
    """A human asked to cancel the run; it ends ``cancelled``, never retried."""

    error_class = "cancelled"


class IssueWithdrawn(CancelRequested):
    """A human closed the run's issue, or took its ready label off: the run ends cancelled,
    the message saying which and when (``cancelled: issue #12 was closed before the push``)."""
