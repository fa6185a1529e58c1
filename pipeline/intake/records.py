"""What intake keeps and reports: tracker health, poll reports, counters, label vouches.

Also how an accepted issue is recorded (``seen``): the snapshot of what the
trusted label vouched for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config.settings import RepoSettings
from pipeline.store import IssueSnapshot, SeenIssue
from pipeline.trackers.base import LabelMark, TrackerIssue


@dataclass
class TrackerHealth:
    """Back-off state of one tracker's polling."""

    failures: int = 0
    not_before: float = 0.0
    last_error: str | None = None


@dataclass(frozen=True)
class Vouch:
    """What the forge says of an issue's ready label: its event, who added it, trusted or not."""

    mark: LabelMark | None
    actor: str | None
    trusted: bool


@dataclass(frozen=True)
class PollReport:
    tracker: str
    seen: int = 0
    enqueued: int = 0
    unchanged: int = 0
    skipped: bool = False
    error: str | None = None


@dataclass
class IntakeMetrics:
    """Counters the HTTP metrics endpoint reads."""

    poll_errors: dict[str, int] = field(default_factory=dict)
    webhooks_rejected: dict[str, int] = field(default_factory=dict)


def seen(repo: RepoSettings, issue: TrackerIssue, actor: str, mark: LabelMark | None) -> SeenIssue:
    """The issue as intake records it when a trusted actor's ready label is accepted."""
    return SeenIssue(
        tracker=repo.tracker,
        number=issue.number,
        title=issue.title,
        author=issue.author,
        url=issue.url,
        external_id=issue.external_id,
        labeller=actor,
        remote_updated_at=issue.updated_at,
        # What the trusted label vouched for, kept the first time it is seen (see
        # pipeline.intake.issue_text): later polls and edits never overwrite it.
        snapshot=IssueSnapshot(
            issue.title, issue.body, mark.at if mark else None, issue.updated_at
        ),
    )
