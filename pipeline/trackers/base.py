"""The tracker protocol and the neutral data every tracker speaks.

Intake, lifecycle and notifications talk to GitHub, Gitea/Forgejo, GitLab and
the local tracker through ``Tracker`` alone; the forge-specific JSON stays in
the client modules. The small ``field``/``as_*`` helpers turn a surprising
response shape into a classified ``forge_bad_response`` error that names the
URL and the missing piece, instead of a ``KeyError`` traceback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pipeline.core.errors import ConfigError, RetryableError

# ``cancelled``: CI stopped without a verdict (a newer push superseded it, say); not a failure.
CiStatus = Literal["pending", "success", "failure", "cancelled", "none"]

_SLUG = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")


@dataclass(frozen=True)
class Comment:
    """One comment (GitHub/Gitea) or user note (GitLab) on an issue."""

    author: str
    body: str
    created_at: str
    id: str = ""  # the forge's comment (note) id, as ``edit_comment`` takes it
    # Written by the tracker's own token user (the daemon); None where the tracker cannot say.
    # Only the daemon's own comments count as its markers (``carries_mark``).
    own: bool | None = None


@dataclass(frozen=True)
class TrackerIssue:
    """An issue as a list call sees it; ``number`` is the per-repo number (GitLab iid)."""

    number: int
    title: str
    body: str
    author: str
    url: str
    labels: tuple[str, ...]
    state: str
    updated_at: str
    external_id: str
    is_pull_request: bool = False


@dataclass(frozen=True)
class IssueDetail(TrackerIssue):
    """An issue with its comments, oldest first."""

    comments: tuple[Comment, ...] = ()


@dataclass(frozen=True)
class LabelMark:
    """One time a label was added: by whom (``None`` if the forge does not say) and when."""

    actor: str | None
    at: str  # the forge's timestamp, ISO 8601


@dataclass(frozen=True)
class Revision:
    """One version of an issue's title or body: who made it, when, and its text if known.

    The first revision is the issue as opened (by its author, at its creation);
    ``text`` is ``None`` where the forge records that an edit happened but not
    the text it left (GitLab system notes).
    """

    at: str
    editor: str | None
    text: str | None


@dataclass(frozen=True)
class EditHistory:
    """Who changed an issue's title and body, and when the ready label was added.

    ``attributed`` is false where the forge cannot say who edited (Gitea,
    Forgejo, the local tracker): then ``title`` and ``body`` are empty and only
    the daemon's own snapshot guards against edits made after the label.
    """

    labels: tuple[LabelMark, ...] = ()  # the ready label's additions, oldest first
    title: tuple[Revision, ...] = ()  # oldest first; the last one is the current text
    body: tuple[Revision, ...] = ()
    attributed: bool = False


@dataclass(frozen=True)
class CiState:
    """The CI verdict for one commit, summed over every check the forge knows.

    ``state`` is ``none`` when no CI reported anything for the commit yet, and
    ``cancelled`` when its CI was stopped before judging it (no verdict on it);
    ``details`` has one human line per check; ``log_hint`` is a URL where a
    human (or the fix-forward prompt) finds the failing log, or ``""``.
    """

    state: CiStatus
    details: tuple[str, ...] = ()
    log_hint: str = ""


class Tracker(Protocol):
    """What the pipeline needs from an issue tracker. ``slug`` is ``owner/name``."""

    name: str

    def list_ready(self, slug: str) -> list[TrackerIssue] | None:
        """Open issues carrying the ready label, oldest (lowest number) first, no PRs.

        ``None`` means unchanged since the previous call (a conditional request
        answered 304, which costs no rate limit).
        """
        ...

    def get_issue(self, slug: str, number: int) -> IssueDetail: ...

    def issue(self, slug: str, number: int) -> TrackerIssue:
        """The issue alone, without its comments (one read: its state and text)."""
        ...

    def labeller(self, slug: str, number: int, label: str) -> str | None:
        """Who applied ``label`` most recently, or ``None`` if no event says."""
        ...

    def label_event(self, slug: str, number: int, label: str) -> LabelMark | None:
        """The most recent addition of ``label``: who and when; ``None`` if no event says."""
        ...

    def edit_history(self, slug: str, number: int, label: str) -> EditHistory:
        """The title and body revisions, with their editors, and the additions of ``label``."""
        ...

    def is_trusted(self, slug: str, actor: str) -> bool:
        """Configured trusted actor, or (where the forge says) write permission."""
        ...

    def add_labels(self, slug: str, number: int, labels: Sequence[str]) -> None: ...

    def remove_label(self, slug: str, number: int, label: str) -> None:
        """Remove ``label``; removing a label the issue lacks is not an error."""
        ...

    def comment(self, slug: str, number: int, body: str) -> str:
        """Post a comment; the new comment's id."""
        ...

    def edit_comment(self, slug: str, number: int, comment_id: str, body: str) -> None:
        """Replace the body of one of the daemon's own comments on issue ``number``."""
        ...

    def list_comments(self, slug: str, number: int) -> list[Comment]:
        """All human comments, oldest first (to find markers such as ``<!-- afk:... -->``)."""
        ...

    def close(self, slug: str, number: int, comment: str | None) -> None:
        """Post ``comment`` (if any), then close the issue as completed."""
        ...

    def commit_ci_state(self, slug: str, sha: str) -> CiState: ...

    def open_pull_request(self, slug: str, head: str, base: str, title: str, body: str) -> str:
        """Open a pull (merge) request from branch ``head`` into ``base``; its web URL.

        An open one for the same branches is reused, so a retried publish never
        opens a second.
        """
        ...


# Every hidden marker the daemon puts in its comments starts so (``<!-- afk-pipeline:...``,
# ``<!-- afk-progress run=...``).
MARK_START = "<!-- afk-"


def carries_mark(comment: Comment, mark: str) -> bool:
    """Whether ``comment`` is one of the daemon's own carrying ``mark``.

    A marker is plain text anyone may paste: on a comment the tracker knows another
    user wrote (``own`` false) it counts for nothing.
    """
    return comment.own is not False and mark in comment.body


def split_slug(slug: str) -> tuple[str, str]:
    """``owner/name`` into its parts; nested groups stay in the owner (GitLab)."""
    if not _SLUG.match(slug) or any(part in (".", "..") for part in slug.split("/")):
        raise ConfigError(f"repo slug {slug!r}: expected owner/name")
    owner, _, name = slug.rpartition("/")
    return owner, name


def bad_response(where: str, problem: str) -> RetryableError:
    """The classified error for a response whose shape is not what the forge documents."""
    return RetryableError("forge_bad_response", f"{where}: {problem}")


def as_list(data: object, where: str) -> list[Any]:
    if not isinstance(data, list):
        raise bad_response(where, f"expected a JSON array, got {_kind(data)}")
    return data


def as_dict(data: object, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise bad_response(where, f"expected a JSON object, got {_kind(data)}")
    return data


def field(obj: Mapping[str, Any], path: str, where: str, kind: type | tuple[type, ...]) -> Any:
    """``obj[a][b]`` for ``path`` ``"a.b"``, checked against ``kind``."""
    value: Any = obj
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            raise bad_response(where, f"field {path!r} is missing")
        value = value[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise bad_response(where, f"field {path!r} is {_kind(value)}, not the expected type")
    return value


def text(obj: Mapping[str, Any], path: str, where: str) -> str:
    """A string field; JSON ``null`` reads as ``""`` (bodies are often null)."""
    value = field(obj, path, where, (str, type(None)))
    return value or ""


def label_names(obj: Mapping[str, Any], where: str, key: str = "name") -> tuple[str, ...]:
    """Names from a ``labels`` array of objects (GitHub, Gitea) or strings (GitLab)."""
    names: list[str] = []
    for item in as_list(obj.get("labels", []), where):
        if isinstance(item, str):
            names.append(item)
        else:
            names.append(field(as_dict(item, where), key, where, str))
    return tuple(names)


def parse_time(value: str) -> datetime:
    """A forge timestamp (``2026-01-01T00:00:05Z``, with or without fractions or offset)."""
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise bad_response("timestamp", f"{value!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
