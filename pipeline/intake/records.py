"""What intake keeps and reports: tracker health, poll reports, counters, label vouches
(and how a label is vouched for: ``vouch_for``).

Also how an accepted issue is recorded (``seen``): the snapshot of what the
trusted label vouched for.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pipeline.config.settings import RepoSettings
from pipeline.store import IssueSnapshot, SeenIssue
from pipeline.trackers.base import LabelMark, Tracker, TrackerIssue


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


def vouch_for(tracker: Tracker, slug: str, number: int, ready: str, labeller: str | None) -> Vouch:
    """Who added the ``ready`` label (``labeller`` when the event named them) and their trust.

    With the labeller known, the label event and the permission are read at once. When
    the forge says someone else added the label now in force (a delivery replayed under
    a new id, or late), its event decides, as on a poll."""
    if labeller is None:
        mark = tracker.label_event(slug, number, ready)
        actor = mark.actor if mark else None
        return Vouch(mark, actor, actor is not None and tracker.is_trusted(slug, actor))
    with ThreadPoolExecutor(1, thread_name_prefix="vouch") as pool:
        trusted = pool.submit(tracker.is_trusted, slug, labeller)
        mark = tracker.label_event(slug, number, ready)
        named = mark.actor if mark is not None else None
        if named is not None and named.lower() != labeller.lower():
            return Vouch(mark, named, tracker.is_trusted(slug, named))
        return Vouch(mark, labeller, trusted.result())


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
