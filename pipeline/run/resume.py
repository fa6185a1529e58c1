"""Answer to resume: a run that follows an escalated one picks up the agent's session.

Intake links the new run to the escalated one (``parent_id``) when a trusted
actor re-adds the ready label after a ``blocked`` or ``tests_red`` ending.
The flow then builds a ``ResumePlan``: the earlier session id, the agent's
question, and the trusted replies since the escalation
(``pipeline.intake.answers``). Implement resumes that session (``claude
--resume``, ``codex exec resume``) with the replies as the next message; the
run's worktree is the repo's reused slot, the path the session was started
in. An agent without a session, or one that cannot resume it, gets a fresh
session whose prompt carries the question and the answer instead; so does a
kept id that could not name a session (an older version kept any the agent
reported): it is never passed to the agent's command line.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.agents.base import checked_session
from pipeline.config.settings import RepoSettings
from pipeline.core.events import EventSink
from pipeline.core.states import RESUMABLE_REASONS, TRAILER, RunState
from pipeline.intake.answers import Answer, replies_after
from pipeline.intake.issue_text import TrustCache
from pipeline.intake.lifecycle import Lifecycle, marker
from pipeline.store import Run, Store
from pipeline.trackers.base import IssueDetail, Tracker

BLOCKED_PREFIX = "the agent is blocked: "
MAX_QUESTION_CHARS = 2_000


@dataclass(frozen=True)
class ResumePlan:
    """How a run answers the escalated run before it."""

    previous_run: int
    session_id: str | None  # None: the agent kept no session; a fresh one is started
    question: str
    replies: tuple[str, ...]  # "author: text", trusted authors only

    def message(self, run_id: int, url: str) -> str:
        """The next message of the resumed session: the replies and the run's contract."""
        return (
            f"You stopped (run {self.previous_run}) with: {_one_line(self.question)}\n\n"
            f"{self._answer()}\n\n"
            "Continue the work with this answer. This is now run "
            f"{run_id}: commit with a message that references the issue and ends with the "
            f"trailers\n\n{TRAILER}: {run_id}\nRefs: {url}\n\n"
            "If you still cannot proceed, do not commit: print one line "
            "`BLOCKED: <reason>` and stop."
        )

    def prompt_section(self) -> str:
        """The same question and answer for a fresh session's first prompt."""
        return (
            f"## Your earlier question and the answer\n\nAn earlier run (run "
            f"{self.previous_run}) stopped with:\n\n{_quoted(self.question)}\n\n"
            f"{self._answer()}\n"
        )

    def _answer(self) -> str:
        if not self.replies:
            return (
                "A maintainer asked you to continue without replying on the issue: "
                "use your best judgement."
            )
        joined = "\n\n---\n\n".join(self.replies)
        return f"The maintainers replied on the issue:\n\n{joined}"


def question_of(run: Run) -> str:
    """What the escalated run asked: the agent's ``BLOCKED:`` reason, or the red tests."""
    error = (run.error or "").strip()
    if error.startswith(BLOCKED_PREFIX):
        error = error[len(BLOCKED_PREFIX) :]
    return error[:MAX_QUESTION_CHARS] or "(no question recorded)"


def answered_run(store: Store, run: Run) -> Run | None:
    """The escalated run ``run`` answers, if intake linked one (see module docstring)."""
    if run.kind != "issue" or run.parent_id is None:
        return None
    previous = store.get_run(run.parent_id)
    if previous is None or previous.state != RunState.ESCALATED:
        return None
    return previous if previous.error_class in RESUMABLE_REASONS else None


@dataclass(frozen=True)
class ResumeDeps:
    """What building a plan reads and where it reports."""

    store: Store
    tracker: Tracker
    lifecycle: Lifecycle
    events: EventSink


def resume_plan(
    deps: ResumeDeps, run: Run, repo: RepoSettings, detail: IssueDetail
) -> ResumePlan | None:
    """The plan for ``run``, or None when it answers no escalated run."""
    previous = answered_run(deps.store, run)
    if previous is None:
        return None
    mark = marker(f"run={previous.id}:ended")
    trusted = TrustCache(deps.tracker, repo.slug)
    answer = replies_after(detail.comments, mark, previous.finished_at, trusted)
    session = checked_session(
        previous.agent_session,
        deps.events,
        f"the session run {previous.id} kept",
        "not resumed: a fresh session is started",
    )
    plan = ResumePlan(previous.id, session, question_of(previous), answer.replies)
    how = f"session {plan.session_id}" if plan.session_id else "a fresh session"
    deps.events(
        "resume",
        f"answers run {previous.id}: {len(answer.replies)} trusted reply(ies) go to {how}",
        {"resumes": previous.id, "session": plan.session_id, **answer.data},
    )
    if answer.untrusted_authors:
        _tell_strangers(deps.lifecycle, repo, run, answer)
    return plan


def _tell_strangers(lifecycle: Lifecycle, repo: RepoSettings, run: Run, answer: Answer) -> None:
    """Once per run: replies by people without write access were not passed to the agent."""
    if run.issue_number is None:
        return
    names = ", ".join(f"@{name}" for name in sorted(answer.untrusted_authors))
    body = (
        f"Run {run.id} resumes the agent with the replies of people with write access only. "
        f"The reply(ies) by {names} were not passed to the agent."
    )
    lifecycle.comment_once(repo, run.issue_number, f"run={run.id}:untrusted-answer", body, run.id)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" for line in text.strip().splitlines())
