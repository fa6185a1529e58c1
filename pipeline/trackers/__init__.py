"""Issue trackers: the ``Tracker`` protocol and one client per forge.

``build_tracker`` turns one ``[trackers.NAME]`` settings block into a client;
the token is resolved here, at the edge, and kept only in the client's HTTP
headers.
"""

from __future__ import annotations

import httpx

from pipeline.config.settings import TrackerSettings
from pipeline.core.errors import ConfigError, FatalError
from pipeline.trackers.base import CiState, Comment, IssueDetail, Tracker, TrackerIssue
from pipeline.trackers.gitea import GiteaTracker
from pipeline.trackers.github import GitHubTracker
from pipeline.trackers.gitlab import GitLabTracker
from pipeline.trackers.http import HttpOptions

REMOTE_KINDS = ("github", "gitea", "forgejo", "gitlab")

__all__ = [
    "REMOTE_KINDS",
    "CiState",
    "Comment",
    "GitHubTracker",
    "GitLabTracker",
    "GiteaTracker",
    "HttpOptions",
    "IssueDetail",
    "Tracker",
    "TrackerIssue",
    "build_tracker",
]


def build_tracker(
    settings: TrackerSettings,
    *,
    transport: httpx.BaseTransport | None = None,
    options: HttpOptions | None = None,
) -> Tracker:
    """The client for a remote tracker (``github``, ``gitea``, ``forgejo``, ``gitlab``).

    The ``local`` kind needs the store, so the daemon builds it itself; a
    ``local`` branch belongs here once ``pipeline.trackers.local`` exists.
    """
    if settings.kind not in REMOTE_KINDS:
        raise ConfigError(
            f"trackers.{settings.name}.kind: {settings.kind!r} is not a remote tracker "
            f"(expected one of {', '.join(REMOTE_KINDS)})"
        )
    token = settings.token.resolve()
    if not token:
        raise FatalError(
            "forge_auth",
            f"trackers.{settings.name}.token: {settings.token.describe()} is not set or empty",
        )
    if settings.kind == "github":
        return GitHubTracker(settings, token, options=options, transport=transport)
    if settings.kind == "gitlab":
        return GitLabTracker(settings, token, options=options, transport=transport)
    return GiteaTracker(settings, token, options=options, transport=transport)
