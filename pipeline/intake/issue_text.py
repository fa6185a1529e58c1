"""Only trusted authors' text reaches the agent.

A trusted actor's ready label vouches for the issue as it stood at that
moment. What reaches the prompt is therefore:

- the title and body as labelled, or a later revision by a trusted editor.
  Where the forge says who edited (GitHub, GitLab) the revisions are weighed
  one by one; a revision whose text the forge does not keep may come from the
  snapshot intake took when it accepted the label, if the snapshot falls on
  that revision; if nothing trusted can be recovered, the text is left out.
  Where the forge cannot say (Gitea, Forgejo, local), the snapshot is the
  text: a change made after intake saw the label never reaches the agent;
- comments by trusted authors (``Tracker.is_trusted``, asked once per author
  per run). Other comments are left out, or with ``untrusted_text = "quote"``
  quoted in a fence the prompt marks as untrusted data;
- all of it without hidden content (``pipeline.intake.sanitize``).

An edit made in the same second as the label by someone untrusted counts as
made after it. The run's timeline gets one event saying what was left out and
why, naming untrusted authors but never quoting them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pipeline.config.settings import TrackerSettings
from pipeline.intake.sanitize import one_line, strip_hidden
from pipeline.store import Issue
from pipeline.trackers.base import (
    Comment,
    EditHistory,
    IssueDetail,
    Revision,
    Tracker,
    carries_mark,
    parse_time,
)

Trusted = Callable[[str | None], bool]

BODY_LEFT_OUT = (
    "(The description is left out: it was changed after the ready label by someone who is "
    "not trusted on this repository, and the text as labelled could not be recovered. "
    "Work from the title and the comments; if they are not enough, print "
    "`BLOCKED: <what is missing>`.)"
)


@dataclass(frozen=True)
class Snapshot:
    """Intake's copy of the issue at the label; ``at`` places it among the forge's edits."""

    title: str
    body: str
    labelled_at: str | None
    at: str | None

    @classmethod
    def of(cls, record: Issue | None) -> Snapshot | None:
        if record is None or record.snapshot_taken_at is None:
            return None
        return cls(
            record.labelled_title or "",
            record.labelled_body or "",
            record.labelled_at,
            record.labelled_remote_updated_at,
        )


@dataclass(frozen=True)
class Choice:
    """The text chosen for the title or the body; ``source`` says which version it is."""

    text: str | None  # None: left out
    source: str  # current | as labelled | trusted revision | first seen | left out
    note: str = ""  # why, for the timeline ("" when the current text is used as is)


@dataclass(frozen=True)
class TrustedIssue:
    """What the prompt may show, and the timeline event that says what was left out."""

    title: str
    body: str
    comments: tuple[str, ...]  # "author: text", trusted authors only
    quoted: tuple[tuple[str, str], ...]  # (author, text) of untrusted comments to quote
    message: str
    data: dict[str, object] = field(default_factory=dict)


class TrustCache:
    """``Tracker.is_trusted`` asked at most once per actor; nobody (``None``) is untrusted."""

    def __init__(self, tracker: Tracker, slug: str) -> None:
        self.tracker = tracker
        self.slug = slug
        self.known: dict[str, bool] = {}

    def __call__(self, actor: str | None) -> bool:
        if not actor:
            return False
        if actor not in self.known:
            self.known[actor] = self.tracker.is_trusted(self.slug, actor)
        return self.known[actor]


def trusted_issue(
    tracker: Tracker,
    settings: TrackerSettings,
    slug: str,
    detail: IssueDetail,
    snapshot: Snapshot | None,
) -> TrustedIssue:
    """The issue's text as the agent may see it (the tracker is asked who edited what)."""
    trusted = TrustCache(tracker, slug)
    history = tracker.edit_history(slug, detail.number, settings.ready_label)
    title, body = choose_text(history, detail, trusted, snapshot)
    return assemble(detail, title, body, trusted, quote=settings.untrusted_text == "quote")


def choose_text(
    history: EditHistory, detail: IssueDetail, trusted: Trusted, snapshot: Snapshot | None
) -> tuple[Choice, Choice]:
    """The title and body to use: weighed revisions where attributed, else the snapshot."""
    if not history.attributed:
        return (
            first_seen(detail.title, snapshot.title if snapshot else None),
            first_seen(detail.body, snapshot.body if snapshot else None),
        )
    label_at = label_time(history, trusted, snapshot)
    titled: tuple[str, datetime] | None = None
    bodied: tuple[str, datetime] | None = None
    if snapshot is not None and snapshot.at:
        titled = (snapshot.title, parse_time(snapshot.at))
        bodied = (snapshot.body, parse_time(snapshot.at))
    return (
        choose_revision(history.title, label_at, trusted, titled),
        choose_revision(history.body, label_at, trusted, bodied),
    )


def label_time(
    history: EditHistory, trusted: Trusted, snapshot: Snapshot | None
) -> datetime | None:
    """When a trusted actor last added the ready label (else intake's record of it)."""
    for mark in reversed(history.labels):
        if trusted(mark.actor):
            return parse_time(mark.at)
    if snapshot is not None and snapshot.labelled_at:
        return parse_time(snapshot.labelled_at)
    return None


def first_seen(current: str, snapshot: str | None) -> Choice:
    """Unattributed forges: the text intake saw with the label, whoever changed it since."""
    if snapshot is None:
        return Choice(current, "current", "no snapshot was taken at the label; current text used")
    if snapshot == current:
        return Choice(current, "current")
    return Choice(
        snapshot,
        "first seen",
        "changed since the daemon first saw the label and the forge does not say by whom; "
        "the text as first seen is used",
    )


def choose_revision(
    revisions: Sequence[Revision],
    label_at: datetime | None,
    trusted: Trusted,
    snapshot: tuple[str, datetime] | None,
) -> Choice:
    """The newest revision the label or a trusted editor vouches for whose text is known."""
    ordered = sorted(revisions, key=lambda rev: parse_time(rev.at))
    for revision in reversed(eligible(ordered, label_at, trusted)):
        text = revision.text
        if text is None and snapshot is not None and in_effect(ordered, snapshot[1]) is revision:
            text = snapshot[0]
        if text is not None:
            return _chosen(ordered, revision, text, label_at, trusted)
    names = _untrusted_editors(ordered, label_at, trusted)
    return Choice(
        None, "left out", f"edited after the label by {names}; the text as labelled is unknown"
    )


def eligible(
    ordered: Sequence[Revision], label_at: datetime | None, trusted: Trusted
) -> list[Revision]:
    """The revision in force before the label, then every later one by a trusted editor."""
    if label_at is None:
        return [rev for rev in ordered if trusted(rev.editor)]
    before = [rev for rev in ordered if parse_time(rev.at) < label_at]
    after = [rev for rev in ordered if parse_time(rev.at) >= label_at and trusted(rev.editor)]
    return before[-1:] + after


def in_effect(ordered: Sequence[Revision], when: datetime) -> Revision | None:
    """The revision that was current at ``when`` (the newest one made at or before it)."""
    current = None
    for revision in ordered:
        if parse_time(revision.at) <= when:
            current = revision
    return current


def _chosen(
    ordered: Sequence[Revision],
    revision: Revision,
    text: str,
    label_at: datetime | None,
    trusted: Trusted,
) -> Choice:
    if revision is ordered[-1]:
        return Choice(text, "current")
    later = [rev for rev in ordered if parse_time(rev.at) > parse_time(revision.at)]
    names = _names(rev.editor for rev in later if not trusted(rev.editor))
    by_label = label_at is not None and parse_time(revision.at) < label_at
    source = "as labelled" if by_label else "trusted revision"
    where = " (text from the snapshot taken at the label)" if revision.text is None else ""
    what = "the text as labelled" if by_label else f"the revision by {revision.editor}"
    return Choice(text, source, f"edited after the label by {names}; {what} is used{where}")


def _untrusted_editors(
    ordered: Sequence[Revision], label_at: datetime | None, trusted: Trusted
) -> str:
    after = [rev for rev in ordered if label_at is None or parse_time(rev.at) >= label_at]
    return _names(rev.editor for rev in after if not trusted(rev.editor))


def _names(editors: Iterable[str | None]) -> str:
    names = sorted({editor or "an unknown user" for editor in editors})
    return ", ".join(names) or "an unknown user"


# Every comment the daemon posts carries a marker ``<!-- afk-pipeline:KEY -->``, or, for the
# progress comment it edits in place, ``<!-- afk-progress run=N -->``.
DAEMON_MARK = "<!-- afk-pipeline:"
PROGRESS_MARK = "<!-- afk-progress run="


def posted_by_daemon(comment: Comment) -> bool:
    """Whether a comment is one of the daemon's own (a lifecycle note or the progress one).

    A stranger's comment carrying a pasted marker is not (``carries_mark``): it is
    counted, left out or quoted like any stranger's words.
    """
    return carries_mark(comment, DAEMON_MARK) or carries_mark(comment, PROGRESS_MARK)


class _Stripper:
    """``strip_hidden`` that adds up what it removed."""

    def __init__(self) -> None:
        self.html_comments = 0
        self.invisible_chars = 0

    def __call__(self, text: str) -> str:
        stripped = strip_hidden(text)
        self.html_comments += stripped.html_comments
        self.invisible_chars += stripped.invisible_chars
        return stripped.text


def assemble(
    detail: IssueDetail, title: Choice, body: Choice, trusted: Trusted, *, quote: bool
) -> TrustedIssue:
    """Comments split by trust, everything stripped, and the timeline's account of it."""
    strip = _Stripper()
    kept, quoted, left_out = [], [], Counter[str]()
    for comment in detail.comments:
        if posted_by_daemon(comment):
            continue  # the daemon's own lifecycle notes: neither the issue's text nor a stranger's
        if trusted(comment.author):
            kept.append(f"{comment.author}: {strip(comment.body)}")
            continue
        left_out[comment.author] += 1
        if quote:
            quoted.append((comment.author, strip(comment.body)))
    title_text = one_line(strip(title.text)) if title.text is not None else ""
    title_text = title_text or f"Issue #{detail.number}"
    body_text = strip(body.text) if body.text is not None else BODY_LEFT_OUT
    data: dict[str, object] = {
        "title": title.source,
        "body": body.source,
        "comments_kept": len(kept),
        "comments_left_out": sum(left_out.values()),
        "comments_quoted": len(quoted),
        "untrusted_authors": dict(sorted(left_out.items())),
        "html_comments_stripped": strip.html_comments,
        "invisible_chars_stripped": strip.invisible_chars,
    }
    message = _message(title, body, left_out, quote, strip)
    return TrustedIssue(title_text, body_text, tuple(kept), tuple(quoted), message, data)


def _message(
    title: Choice, body: Choice, left_out: Counter[str], quote: bool, strip: _Stripper
) -> str:
    parts = [
        f"{what} {choice.source}: {choice.note}"
        for what, choice in (("title", title), ("body", body))
        if choice.note
    ]
    if left_out:
        authors = ", ".join(f"{name} ({count})" for name, count in sorted(left_out.items()))
        verb = "quoted as untrusted" if quote else "left out"
        parts.append(f"{sum(left_out.values())} comment(s) by untrusted authors {verb}: {authors}")
    if strip.html_comments or strip.invisible_chars:
        parts.append(
            f"hidden content stripped: {strip.html_comments} HTML comment(s), "
            f"{strip.invisible_chars} invisible character(s)"
        )
    return "issue text: " + ("; ".join(parts) if parts else "all of it from trusted authors")
