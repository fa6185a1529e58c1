"""The agent protocol: what one agent invocation is given and what it reports.

An agent runs in a worktree with a scrubbed environment and a per-repo
``HOME``; it reports an ``AgentResult`` or raises a classified error. The
classification lives here so every preset maps failures the same way:
transient model-API trouble is retryable, turn and budget limits escalate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pipeline.core.errors import CancelRequested, EscalationError, FatalError, RetryableError
from pipeline.core.events import EventSink
from pipeline.core.masking import mask
from pipeline.core.proc import CommandResult, StopToken
from pipeline.sandbox.jail import Jail

# What a session id the daemon keeps and passes back on a resume may be: Claude Code's and
# Codex's are UUIDs; at most the history's column (runs.agent_session), never an option.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
_BLOCKED = re.compile(r"^[ \t]*BLOCKED:[ \t]*(\S.*?)\s*$", re.MULTILINE)
_RETRYABLE_TEXT = (
    ("overloaded", "agent_overloaded"),
    ("high demand", "agent_overloaded"),  # Codex's words for a 5xx from the model API
    ("rate limit", "agent_rate_limited"),
    ("rate_limit", "agent_rate_limited"),
    ("too many requests", "agent_rate_limited"),
    ("econnrefused", "network"),
    ("econnreset", "network"),
    ("connection error", "network"),
    ("network", "network"),
    ("timed out", "network"),
    ("stream disconnected", "network"),
)
MAX_SUMMARY_CHARS = 200


@dataclass(frozen=True)
class AgentRequest:
    """One invocation: the prompt, where to work, and whose session to resume.

    ``jail`` runs the agent confined and builds its environment from an
    explicit list. Without one (tools and tests that call an agent directly)
    the agent runs unconfined with ``env`` as the host environment it picks
    variables from and ``home`` as its HOME.
    """

    prompt: str
    workdir: Path
    env: Mapping[str, str]  # the host environment the pass-through list picks from
    home: Path  # per-repo HOME: the agent's own state stays with the repo
    resume_session: str | None = None
    max_budget_usd: float | None = None
    jail: Jail | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)  # e.g. GIT_EDITOR for a rebase

    def __repr__(self) -> str:  # the env may hold anything: never print it
        return f"AgentRequest(workdir={self.workdir}, resume_session={self.resume_session!r})"

    @property
    def confinement(self) -> Jail:
        """The jail to run in (an unconfined one when none was given)."""
        return self.jail or Jail.unconfined(self.workdir, self.env, self.home)


@dataclass(frozen=True)
class AgentResult:
    """What one invocation reported (from its final result event)."""

    session_id: str | None = None
    subtype: str | None = None  # success | error_max_turns | error_max_budget_usd | ...
    is_error: bool = False
    num_turns: int = 0
    tokens_in: int = 0  # input tokens, cache reads and writes included
    tokens_out: int = 0
    cost_usd: float = 0.0
    result_text: str = ""
    blocked_reason: str | None = None
    api_error_status: int | None = None
    permission_denials: tuple[str, ...] = ()
    tool_calls: int = 0
    errors: tuple[str, ...] = ()
    exit_code: int | None = None
    lingered: bool = False  # killed after the grace that followed its result


class Agent(Protocol):
    """A coding agent the pipeline can run headless in a worktree.

    ``run`` returns the result of every invocation that reported one, failed
    ones included, so the caller can record its cost before classifying it
    with ``classify_result``. It raises only when there is no result: stopped
    (``CancelRequested``), idle (``RetryableError("idle_timeout")``), crashed
    (``RetryableError("agent_crash")``) or misconfigured (``FatalError``).
    """

    name: str

    def run(
        self, request: AgentRequest, *, events: EventSink, stop: StopToken | None
    ) -> AgentResult: ...


def result_data(result: AgentResult) -> dict[str, object]:
    """The run-level figures of a result, as event data."""
    return {
        "session_id": result.session_id,
        "subtype": result.subtype,
        "is_error": result.is_error,
        "num_turns": result.num_turns,
        "tokens_in": result.tokens_in,
        "tokens_out": result.tokens_out,
        "cost_usd": result.cost_usd,
        "tool_calls": result.tool_calls,
        "api_error_status": result.api_error_status,
    }


def blocked_reason(text: str) -> str | None:
    """The reason of the last ``BLOCKED: <reason>`` line in ``text``, if any."""
    found = _BLOCKED.findall(text)
    return mask(str(found[-1]))[:500] if found else None


def summarise(value: object, limit: int = MAX_SUMMARY_CHARS) -> str:
    """One bounded line for the timeline, masked before it is cut (a secret cut short is
    no longer a form ``mask`` knows in full: only a piece of at least 4 characters is)."""
    text = " ".join(mask(str(value)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def checked_session(
    value: object, events: EventSink, source: str, refused: str = "not kept"
) -> str | None:
    """``value`` when it can name a session to resume; else None, and the timeline says so
    (the value escaped and cut, then ``refused``). For an id an agent reports, and for one
    read back from the history before it is resumed (an older version kept any)."""
    if not isinstance(value, str) or not value:
        return None
    if _SESSION_ID.fullmatch(value):
        return value
    shown = summarise(repr(value[:40]) + ("…" if len(value) > 40 else ""))
    events("agent", f"{source}: {shown} ({len(value)} characters) is not a session id; {refused}")
    return None


def effective_budget(*budgets: float | None) -> float | None:
    """The tightest of the configured budgets (``None`` when none is set)."""
    present = [budget for budget in budgets if budget is not None]
    return min(present) if present else None


def check_process(name: str, command: CommandResult, result: AgentResult | None) -> AgentResult:
    """The result, or the classified error for a process that gave none."""
    if command.stopped is not None:
        raise CancelRequested(f"agent {name} stopped: {command.stopped}")
    if command.idle_timed_out:
        raise RetryableError("idle_timeout", f"agent {name} gave no output for too long; killed")
    if command.timed_out:
        raise RetryableError("agent_timeout", f"agent {name} ran past its time limit; killed")
    if result is None:
        raise RetryableError(
            "agent_crash",
            f"agent {name} exited with code {command.returncode} before its result: "
            f"{summarise(command.output_tail[-600:], 600)}",
        )
    return result


def outcome_words(result: AgentResult) -> str:
    """How an invocation ended, in words: never "success" for an error result (a 529 says so)."""
    if result.api_error_status is not None:
        return f"API error {result.api_error_status} ({result.subtype or 'no result'})"
    if result.is_error:
        return f"error ({result.subtype or 'no result'})"
    return result.subtype or "no result"


def classify_result(name: str, result: AgentResult, max_budget_usd: float | None) -> None:
    """Raise the classified error a failed or over-budget result stands for."""
    if max_budget_usd is not None and result.cost_usd > max_budget_usd:
        raise EscalationError(
            "budget",
            f"agent {name} spent ${result.cost_usd:.4f}, over the run budget of "
            f"${max_budget_usd:.4f}; raise max_budget_usd or split the issue",
        )
    if not result.is_error:
        return
    detail = summarise("; ".join(result.errors) or result.result_text, 400)
    if result.subtype == "error_max_turns":
        raise EscalationError(
            "max_turns",
            f"agent {name} reached its turn limit after {result.num_turns} turns: {detail}",
        )
    if result.subtype == "error_max_budget_usd":
        raise EscalationError(
            "budget", f"agent {name} reached its budget (${result.cost_usd:.4f}): {detail}"
        )
    _classify_api_error(name, result, detail)


def _classify_api_error(name: str, result: AgentResult, detail: str) -> None:
    status = result.api_error_status
    if status in (401, 403):
        raise FatalError("agent_auth", f"agent {name}: the model API refused the key ({status})")
    if status == 429:
        raise RetryableError("agent_rate_limited", f"agent {name}: rate limited: {detail}")
    if status is not None and (status == 529 or status >= 500):
        raise RetryableError("agent_overloaded", f"agent {name}: API error {status}: {detail}")
    lowered = detail.lower()
    for needle, kind in _RETRYABLE_TEXT:
        if needle in lowered:
            raise RetryableError(kind, f"agent {name}: {detail}")
    raise RetryableError("agent_error", f"agent {name} ended in error ({result.subtype}): {detail}")
