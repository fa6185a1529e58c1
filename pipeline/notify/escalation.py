"""Every text that tells a human how a run ended, built by one function.

The issue comment and the notification of a run's ending say the same
three things: what happened, what was kept and where, and the exact next
step (``pipeline runs retry N``, or ``pipeline repos unfreeze`` when the repo
is frozen). ``ending_message`` builds both, so they cannot disagree; the list
of open escalations (``pipeline escalations``, ``GET /api/escalations``) takes
its next steps from the same ``next_step``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from pipeline.core.events import EventSink

if TYPE_CHECKING:
    from pipeline.store.escalations import AckRefused
    from pipeline.store.records import Escalation

NotifyKind = Literal["escalation", "freeze", "success", "recovered"]


class Notifies(Protocol):
    """The notify entry point (``pipeline.notify.apprise.Notifier`` provides it)."""

    def notify(
        self,
        title: str,
        body: str,
        *,
        kind: NotifyKind,
        events: EventSink,
        run_id: int | None = None,
        key: str | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class EndingText:
    """The facts of one ending; ``ending_message`` turns them into words."""

    repo: str
    run_id: int
    headline: str  # succeeded | failed | escalated | cancelled | timed out | frozen
    reason: str  # the error class or escalation reason ("" for a success)
    what_happened: str
    kept: tuple[tuple[str, str], ...] = ()  # (what, where)
    frozen: bool = False
    retryable: bool = True  # False for a success: there is nothing to retry
    ready_label: str | None = None  # labelling the issue again also retries it
    issue_url: str | None = None
    sha: str | None = None
    question: str | None = None  # what a blocked agent asked: a reply on the issue answers it


def unfreeze_command(repo: str) -> str:
    return f'pipeline repos unfreeze {shlex.quote(repo)} --note "what you found and fixed"'


def frozen_wait(repo: str) -> str:
    """What a run queued in frozen ``repo`` waits for: a human's unfreeze."""
    return f"repo {repo} is frozen: the run waits until `{unfreeze_command(repo)}`"


def next_step(text: EndingText) -> str:
    """The exact command a human runs next, in one line."""
    if text.frozen:
        return unfreeze_command(text.repo)
    if not text.retryable:
        return f"pipeline runs show {text.run_id}"
    return f"pipeline runs retry {text.run_id}"


def ending_title(text: EndingText) -> str:
    why = f" ({text.reason})" if text.reason else ""
    return f"[afk-pipeline] {text.repo}: run {text.run_id} {text.headline}{why}"


def answer_lines(question: str, ready_label: str, reason: str) -> list[str]:
    """The agent's question (or why it stopped), quoted, and how to answer it from the issue."""
    quoted = [f"> {line}" for line in question.strip().splitlines()] or ["> (no question)"]
    return [
        "The agent asks:" if reason == "blocked" else "The agent stopped with:",
        *quoted,
        "",
        f"To answer: reply in this issue, then add the `{ready_label}` label again. The "
        "agent resumes where it stopped, with the replies posted since this comment by "
        "people with write access (anyone else's reply is not passed on).",
    ]


def ending_message(text: EndingText) -> tuple[str, str]:
    """Title and body: what happened, what was kept where, and the next step."""
    head = f"Repo {text.repo}, run {text.run_id}" + (f", commit {text.sha}" if text.sha else "")
    lines = [f"{head}: {text.headline}.", "", "What happened:", f"  {text.what_happened.strip()}"]
    if text.issue_url:
        lines += ["", f"Issue: {text.issue_url}"]
    if text.question and text.ready_label:
        lines += ["", *answer_lines(text.question, text.ready_label, text.reason)]
    if text.retryable:
        lines += ["", "What was kept (nothing was reverted or deleted):"]
        lines += [f"  - {label}: {where}" for label, where in text.kept] or ["  - nothing"]
    lines += ["", "Next step:" if not text.retryable else "Next step, after fixing the cause:"]
    lines.append(f"  {next_step(text)}")
    if text.frozen:
        lines.append("  (the repo's queue stays stopped until then)")
    elif text.retryable and text.sha:  # a new run of the issue would do the change again
        again = f", or labelling the issue `{text.ready_label}` again," if text.ready_label else ""
        lines.append(f"  (the retry{again} watches {text.sha[:12]} again; it implements nothing)")
    elif text.retryable and text.ready_label:
        lines.append(f"  (or label the issue `{text.ready_label}` again)")
    lines.append(f"  Review: pipeline runs show {text.run_id}")
    return ending_title(text), "\n".join(lines)


def ack_command(escalation_id: int | str) -> str:
    return f'pipeline escalations ack {escalation_id} --note "what you did"'


def escalation_next_step(escalation: Escalation) -> str:
    """The exact command a human runs next for an escalation still open."""
    if escalation.of_freeze:  # the unfreeze acknowledges it; nothing else may
        return unfreeze_command(escalation.repo_name)
    if escalation.run_id is None:  # a tracker refused, a budget spent: its detail says why
        return f"fix the cause its detail names, then {ack_command(escalation.id)}"
    text = EndingText(
        repo=escalation.repo_name,
        run_id=escalation.run_id,
        headline="escalated",
        reason=escalation.reason,
        what_happened=escalation.detail,
        frozen=escalation.repo_frozen,
    )
    return next_step(text)


def ack_refusals(refused: AckRefused) -> list[str]:
    """Why nothing was acknowledged, one line per escalation."""
    lines = [f"escalation {i}: no such escalation" for i in refused.unknown]
    lines += [
        f"escalation {e.id}: already acknowledged by {e.acknowledged_by} "
        f"at {e.acknowledged_at:%Y-%m-%d %H:%M:%S} UTC"
        for e in refused.done
    ]
    lines += [
        f"escalation {e.id}: repo {e.repo_name} is still frozen; unfreeze it instead, which "
        f"acknowledges it: {unfreeze_command(e.repo_name)}"
        for e in refused.frozen
    ]
    return lines
