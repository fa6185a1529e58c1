"""Stateful loopback fakes of GitHub, Gitea/Forgejo and GitLab for tests and benchmarks.

    fake = FakeGitHub(token="t")
    fake.add_issue("o/r", "Fix it", labels=["ready-for-agent"])
    with fake:  # served on 127.0.0.1; stopping closes clients made by client_for
        tracker = client_for(fake)

See ``base.FakeForge`` for fault injection, the request log and rate counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.testing.forges.base import (
    FakeForge,
    RecordedRequest,
    ServedApp,
    send_github_form_webhook,
    send_webhook,
    serve_app,
)
from pipeline.testing.forges.gitea import FakeGitea
from pipeline.testing.forges.github import FakeGitHub
from pipeline.testing.forges.gitlab import FakeGitLab

FORGES: dict[str, type[FakeForge]] = {
    "github": FakeGitHub,
    "gitea": FakeGitea,
    "gitlab": FakeGitLab,
}


# Each forge's spelling of "may write to the repo" (GitLab: the Developer access level).
WRITER = {"github": "write", "gitea": "write", "gitlab": "30"}


@contextmanager
def served(
    kind: str, *slugs: str, token: str = "fake-token", writer: str | None = None
) -> Iterator[FakeForge]:
    """A fake forge of ``kind`` ("github", "gitea", "gitlab") holding ``slugs``, served;
    ``writer`` is a user with write permission on each."""
    forge = FORGES[kind](token=token)
    for slug in slugs:
        forge.add_repo(slug)
        if writer is not None:
            forge.set_permission(slug, writer, WRITER[kind])
    forge.serve()
    try:
        yield forge
    finally:
        forge.stop()


__all__ = [
    "FORGES",
    "WRITER",
    "FakeForge",
    "FakeGitHub",
    "FakeGitLab",
    "FakeGitea",
    "RecordedRequest",
    "ServedApp",
    "send_github_form_webhook",
    "send_webhook",
    "serve_app",
    "served",
]
