"""A forge that refuses the daemon's token: intake backs off and tells a human once.

Against the loopback fake forges, with the intake's clock in the test's hand: a
revoked token (401) or a token without permission (403 without a rate limit)
makes a repo's polls back off exponentially up to a cap instead of repeating at
the poll interval; one escalation names the tracker, the repo and the status;
the first answer after it resets the back-off, picks the issue up and sends one
more notification. A 403 rate limit is not a refusal: nobody is called for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings, SecretRef, Settings, TrackerSettings
from pipeline.intake.access import MAX_POLL_BACKOFF_S
from pipeline.intake.lifecycle import Lifecycle
from pipeline.intake.service import Intake
from pipeline.store import Store
from pipeline.testing.forges import FakeGitea, FakeGitHub, FakeGitLab
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import ManualClock, client_for
from pipeline.testing.sinks import RecordingNotifier

SLUG = "acme/widgets"
READY = "ready-for-agent"
INTERVAL_S = 5.0
FORGES = {"github": FakeGitHub, "gitea": FakeGitea, "gitlab": FakeGitLab}


@dataclass
class World:
    fake: FakeForge
    intake: Intake
    store: Store
    clock: ManualClock
    inbox: RecordingNotifier

    def asked(self) -> int:
        """Requests the forge received so far."""
        with self.fake.lock:
            return len(self.fake.requests)

    def wait_s(self) -> float:
        [refusal] = self.intake.access.refusals()
        return refusal.not_before - self.clock.time()


@contextmanager
def world(root: Path, kind: str, token: SecretRef | None = None) -> Iterator[World]:
    fake = FORGES[kind](token="the-token")
    fake.add_issue(SLUG, "Make it faster", labels=[READY], labelled_by="alice")
    token = token or SecretRef()
    tracker = TrackerSettings(name="forge", kind=kind, trusted_actors=("alice",), token=token)
    repo = RepoSettings(name="widgets", tracker="forge", slug=SLUG, remote_url="unused")
    settings = Settings(
        database_url=f"sqlite:///{root / 'history.db'}",
        volume=root,
        trackers=(tracker,),
        repos=(repo,),
        poll_interval_s=INTERVAL_S,
    )
    clock = ManualClock(now=time.time())
    inbox = RecordingNotifier()
    store = Store(settings.database_url)
    store.upgrade()
    store.sync_repos(settings.repos)
    with fake:
        client = client_for(fake, clock=clock, trusted_actors=("alice",), token_source=token)
        lifecycle = Lifecycle(store, {"forge": client}, {"forge": tracker})
        intake = Intake(
            store, settings, {"forge": client}, lifecycle, clock=clock.time, notifier=inbox
        )
        try:
            yield World(fake, intake, store, clock, inbox)
        finally:
            store.close()


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_a_revoked_token_backs_off_tells_once_and_recovers(tmp_path: Path, kind: str) -> None:
    """401 on every poll: the repo is asked again after 5, 10, 20... s (never more than the
    cap), one escalation names tracker, repo and status; the token fixed, the issue is queued
    and one more notification says polling is back."""
    with world(tmp_path, kind) as w:
        w.fake.token = "rotated-by-an-admin"
        report = w.intake.poll("forge")
        assert report.error is not None and "401" in report.error
        assert w.asked() == 1
        [alarm] = w.inbox.sent
        assert alarm.kind == "escalation"
        assert all(word in alarm.title + alarm.body for word in ("forge", SLUG, "401"))
        [escalation] = w.store.list_escalations("widgets")
        assert escalation.reason == "tracker_refused" and SLUG in escalation.detail

        waits = []
        for _ in range(10):
            waits.append(w.wait_s())
            w.intake.poll("forge")  # inside the back-off: nothing is asked
            w.clock.advance(w.wait_s() + 0.1)
            w.intake.poll("forge")  # past it: asked once more, refused again
        assert w.asked() == 11  # one request per back-off, none in between
        assert waits[:4] == pytest.approx([5.0, 10.0, 20.0, 40.0], abs=0.2)
        assert max(waits) <= MAX_POLL_BACKOFF_S and w.wait_s() == pytest.approx(900, abs=0.2)
        assert len(w.inbox.sent) == 1  # told once, not once per poll

        w.fake.token = "the-token"
        w.clock.advance(w.wait_s() + 0.1)
        w.intake.poll("forge")
        assert [r.state for r in w.store.list_runs()] == ["queued"]
        assert w.intake.access.refusals() == []
        assert [s.kind for s in w.inbox.sent] == ["escalation", "recovered"]
        assert "forge" in w.inbox.sent[1].title and SLUG in w.inbox.sent[1].title


def test_a_403_without_rate_limit_is_a_refusal_named_403(tmp_path: Path) -> None:
    """A 403 that says nothing of a rate limit (the token lacks a permission) is a refusal."""
    with world(tmp_path, "github") as w:
        body = '{"message": "Resource not accessible by personal access token"}'
        w.fake.inject(r"/issues$", status=403, body=body, times=1000)
        w.intake.poll("forge")
        [refusal] = w.intake.access.refusals()
        assert refusal.status == "403"
        [alarm] = w.inbox.sent
        assert "403" in alarm.title and SLUG in alarm.body


def test_a_403_rate_limit_calls_nobody(tmp_path: Path) -> None:
    """GitHub's 403 with an exhausted rate limit backs off by its reset and alarms no human."""
    with world(tmp_path, "github") as w:
        reset = str(int(time.time()) + 120)
        headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
        body = '{"message": "API rate limit exceeded"}'
        w.fake.inject(r"/issues$", status=403, headers=headers, body=body)
        report = w.intake.poll("forge")
        assert report.error is not None and "rate limit" in report.error
        assert w.intake.access.refusals() == [] and w.inbox.sent == []
        assert w.store.list_escalations("widgets") == []


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_a_repo_the_token_cannot_see_backs_off_tells_once_and_recovers(
    tmp_path: Path, kind: str
) -> None:
    """404 on the ready list (the repo is gone, renamed, or private to the token, which GitHub
    answers 404, not 403): backed off like a refusal, one escalation saying the repo is missing
    or invisible to the token, naming tracker, slug and status; visible again, one all-clear."""
    with world(tmp_path, kind) as w:
        with w.fake.lock:
            hidden = w.fake.repos.pop(SLUG)
        report = w.intake.poll("forge")
        assert report.error is not None and "404" in report.error
        [alarm] = w.inbox.sent
        assert alarm.kind == "escalation"
        assert all(word in alarm.title for word in ("forge", SLUG, "404", "cannot see it"))
        assert "missing or the token cannot see it" in alarm.body and SLUG in alarm.body
        [escalation] = w.store.list_escalations("widgets")
        assert escalation.reason == "tracker_refused" and "cannot see it" in escalation.detail
        [refusal] = w.intake.access.refusals()
        assert refusal.status == "404"

        asked = w.asked()
        w.intake.poll("forge")  # inside the back-off: nothing is asked, nobody told again
        assert w.asked() == asked and len(w.inbox.sent) == 1
        w.clock.advance(w.wait_s() + 0.1)
        w.intake.poll("forge")
        assert w.asked() == asked + 1 and w.wait_s() == pytest.approx(10.0, abs=0.2)
        assert len(w.inbox.sent) == 1

        with w.fake.lock:
            w.fake.repos[SLUG] = hidden
        w.clock.advance(w.wait_s() + 0.1)
        w.intake.poll("forge")
        assert [r.state for r in w.store.list_runs()] == ["queued"]
        assert w.intake.access.refusals() == []
        assert [s.kind for s in w.inbox.sent] == ["escalation", "recovered"]
        assert SLUG in w.inbox.sent[1].body and "404" not in w.inbox.sent[1].title


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_a_token_rotated_in_its_file_is_used_without_a_restart(tmp_path: Path, kind: str) -> None:
    """The forge now wants another token and the token file holds it (an installation token
    renewed, a revoked one replaced): after the 401 the file is read again and the call made
    once more with it; the poll goes on, the next one sends the new token at once, nobody is
    called. Refused while the file still holds the old token: asked once, not retried."""
    token_file = tmp_path / "forge-token"
    token_file.write_text("the-token\n")
    with world(tmp_path, kind, SecretRef(file=token_file)) as w:
        w.intake.poll("forge")
        assert [r.state for r in w.store.list_runs()] == ["queued"]
        asked = w.asked()

        w.fake.token = "renewed-token"
        token_file.write_text("renewed-token\n")
        w.clock.advance(INTERVAL_S + 0.1)
        report = w.intake.poll("forge")
        assert report.error is None
        assert w.asked() == asked + 2  # refused once, asked again with the new token
        assert w.intake.access.refusals() == [] and w.inbox.sent == []
        w.clock.advance(INTERVAL_S + 0.1)
        w.intake.poll("forge")
        assert w.asked() == asked + 3  # the new token straight away

        w.fake.token = "revoked-again"
        w.clock.advance(INTERVAL_S + 0.1)
        report = w.intake.poll("forge")
        assert report.error is not None and "401" in report.error
        assert w.asked() == asked + 4  # the file holds the refused token: no second try
        [alarm] = w.inbox.sent
        assert alarm.kind == "escalation"
