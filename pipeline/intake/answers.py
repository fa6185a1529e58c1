"""A human's answer to a blocked agent: the trusted replies on the issue since it asked.

When a run escalates because the agent is blocked (or the tests never went
green), its ending comment quotes the question. The replies are the comments
posted after that comment (after the escalation's time when the comment cannot
be found). Like the rest of an issue's text (``pipeline.intake.issue_text``),
only trusted authors' replies reach the agent, stripped of hidden content; a
stranger's reply is counted, never quoted, and never passed on, whatever
``untrusted_text`` says: an answer steers a session that already holds a shell.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pipeline.core.errors import PipelineError
from pipeline.intake.issue_text import Trusted, posted_by_daemon
from pipeline.intake.sanitize import strip_hidden
from pipeline.trackers.base import Comment, carries_mark, parse_time


@dataclass(frozen=True)
class Answer:
    """The replies since the escalation: trusted ones as text, untrusted ones as counts."""

    replies: tuple[str, ...]  # "author: text", trusted authors only, hidden content stripped
    untrusted_authors: dict[str, int] = field(default_factory=dict)
    hidden_stripped: int = 0  # HTML comments and invisible characters removed

    @property
    def data(self) -> dict[str, object]:
        """What the timeline records: counts and names, never a stranger's words."""
        return {
            "replies": len(self.replies),
            "untrusted_authors": dict(sorted(self.untrusted_authors.items())),
            "hidden_stripped": self.hidden_stripped,
        }


def replies_after(
    comments: Sequence[Comment], escalation_mark: str, since: datetime | None, trusted: Trusted
) -> Answer:
    """The replies posted after the comment carrying ``escalation_mark`` (else after ``since``)."""
    kept: list[str] = []
    strangers = Counter[str]()
    hidden = 0
    for comment in comments_after(comments, escalation_mark, since):
        if posted_by_daemon(comment):
            continue  # the daemon's own notes are nobody's answer
        if not trusted(comment.author):
            strangers[comment.author or "an unknown user"] += 1
            continue
        stripped = strip_hidden(comment.body)
        hidden += stripped.html_comments + stripped.invisible_chars
        if stripped.text.strip():
            kept.append(f"{comment.author}: {stripped.text.strip()}")
    return Answer(tuple(kept), dict(strangers), hidden)


def comments_after(
    comments: Sequence[Comment], escalation_mark: str, since: datetime | None
) -> Sequence[Comment]:
    """The comments after the escalation's own (else those made after ``since``)."""
    for index in range(len(comments) - 1, -1, -1):
        if carries_mark(comments[index], escalation_mark):
            return comments[index + 1 :]
    if since is None:
        return ()  # nothing says when the agent asked: no comment counts as its answer
    return [c for c in comments if _naive_utc(c.created_at) > since]


def _naive_utc(value: str) -> datetime:
    """A forge time as the store keeps times: naive UTC (an unreadable one sorts first)."""
    try:
        return parse_time(value).astimezone(UTC).replace(tzinfo=None)
    except PipelineError:
        return datetime.min
