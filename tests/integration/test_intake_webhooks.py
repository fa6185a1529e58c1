"""Webhook intake through the daemon's HTTP app: signatures, replays, trust, fast pickup."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline.http.app import AppOptions, ServerHandle, create_app, serve
from pipeline.store import Run
from pipeline.testing.forges import (
    FakeGitea,
    FakeGitHub,
    FakeGitLab,
    send_github_form_webhook,
    send_webhook,
    served,
)
from pipeline.testing.forges.base import FakeForge, webhook_headers
from pipeline.testing.intake_world import IntakeWorld
from tests.unit.test_tracker_webhooks import DOC_PAYLOAD, DOC_SECRET, DOC_SIGNATURE

from .conftest import READY, SLUG, intake_over
from .test_intake import OTHER, untrusted_comments

SECRET_ENV = "AFK_TEST_WEBHOOK_SECRET"
SECRET = "webhook-s3cret"
EVENT = {"github": "issues", "gitea": "issue_label", "gitlab": "Issue Hook"}


class Harness:
    """A world whose intake is served by the daemon's app on 127.0.0.1."""

    def __init__(self, world: IntakeWorld, fake: FakeForge) -> None:
        self.world, self.fake = world, fake
        self.rejected: list[tuple[str, str]] = []
        app = create_app(world.store, world.settings, AppOptions(webhook_handler=self.handle))
        self.metrics = app.state.metrics
        world.intake.on_webhook_rejected = self.on_rejected
        self.server: ServerHandle = serve(app, "127.0.0.1", 0)
        self.url = f"{self.server.url}/webhooks/{fake.forge}"

    def handle(self, tracker: str, headers: Any, body: bytes) -> tuple[int, dict[str, object]]:
        return self.world.intake.handle_webhook(tracker, headers, body)

    def on_rejected(self, tracker: str, reason: str) -> None:
        self.rejected.append((tracker, reason))
        self.metrics.webhook_rejected(tracker, reason)

    def labelled(self, number: int, sender: str, slug: str = SLUG) -> dict[str, Any]:
        fake = self.fake
        if isinstance(fake, FakeGitea):
            return fake.labeled_webhook(slug, number, sender)
        assert isinstance(fake, FakeGitHub | FakeGitLab)
        return fake.labeled_webhook(slug, number, READY, sender)

    def send(
        self, payload: dict[str, Any], *, secret: str = SECRET, delivery_id: str | None = None
    ) -> httpx.Response:
        return send_webhook(
            self.url,
            EVENT[self.fake.forge],
            payload,
            secret,
            kind=self.fake.forge,
            delivery_id=delivery_id,
        )

    def wait_for_run(self, timeout_s: float = 5.0) -> list[Run]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            runs = self.world.runs()
            if runs:
                return runs
            time.sleep(0.01)
        return []


@pytest.fixture
def forge_others() -> tuple[str, ...]:
    """A second repo on the forge, for a delivery about one not enrolled."""
    return (OTHER,)


@contextmanager
def serving(fake: FakeForge, database_url: str, volume: Path) -> Iterator[Harness]:
    with intake_over(fake, SLUG, database_url, volume, webhook_secret_env=SECRET_ENV) as world:
        harness = Harness(world, fake)
        try:
            yield harness
        finally:
            harness.server.stop()


@pytest.fixture
def harness(
    fake: FakeForge, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with serving(fake, database_url, tmp_path / "volume") as built:
        yield built


def test_labelled_webhook_queues_the_issue_without_a_poll(harness: Harness) -> None:
    """A signed labelled delivery is accepted and queues the run itself: no poll lists issues."""
    number = harness.fake.add_issue(SLUG, "hooked", labels=[READY])
    response = harness.send(harness.labelled(number, "alice"))
    assert response.status_code == 202
    assert response.json() == {"status": "accepted", "issue": number}
    runs = harness.wait_for_run()
    assert [run.issue_number for run in runs] == [number]
    listings = [p for p in harness.fake.paths("GET") if p.endswith("/issues")]
    assert listings == [], f"a poll listed the issues: {listings}"


def test_replayed_delivery_is_ignored(harness: Harness) -> None:
    """The same delivery id twice is acted on once; the replay answers 'duplicate'."""
    number = harness.fake.add_issue(SLUG, "hooked", labels=[READY])
    payload = harness.labelled(number, "alice")
    assert harness.send(payload, delivery_id="d-1").status_code == 202
    assert len(harness.wait_for_run()) == 1
    fetched = len(harness.fake.requests)
    replay = harness.send(payload, delivery_id="d-1")
    assert replay.status_code == 200 and replay.json()["status"] == "duplicate"
    assert len(harness.fake.requests) == fetched  # not even fetched again
    assert len(harness.world.runs()) == 1


def test_a_delivery_id_longer_than_its_column_is_400(harness: Harness) -> None:
    """The delivery header is not signed and the store keeps 200 characters of it: a longer
    one failed on PostgreSQL (a 500, nothing said) and was kept whole on SQLite."""
    number = harness.fake.add_issue(SLUG, "hooked", labels=[READY])
    answer = harness.send(harness.labelled(number, "alice"), delivery_id="d" * 201)
    assert answer.status_code == 400, answer.text
    assert "is longer than 200 characters" in answer.text
    assert harness.world.runs() == []


@pytest.mark.parametrize("how", ["wrong-secret", "missing"])
def test_bad_signature_is_401_and_counted(harness: Harness, how: str) -> None:
    """A wrong or missing signature gets 401, queues nothing, and is counted and reported."""
    number = harness.fake.add_issue(SLUG, "hooked", labels=[READY])
    payload = harness.labelled(number, "alice")
    if how == "wrong-secret":
        response = harness.send(payload, secret="not-the-secret")
    else:
        headers = {
            "X-GitHub-Event": "issues",
            "X-Gitea-Event": "issue_label",
            "X-Gitlab-Event": "Issue Hook",
            "X-GitHub-Delivery": "d-2",
        }
        response = httpx.post(harness.url, json=payload, headers=headers, timeout=5)
    assert response.status_code == 401
    assert harness.rejected == [(harness.fake.forge, "missing or wrong signature")]
    assert harness.world.intake.metrics.webhooks_rejected == {harness.fake.forge: 1}
    scrape = httpx.get(f"{harness.server.url}/metrics", timeout=5).text
    labels = f'reason="missing or wrong signature",tracker="{harness.fake.forge}"'
    assert f"pipeline_webhooks_rejected_total{{{labels}}} 1.0" in scrape
    assert harness.world.runs() == []
    assert SECRET not in response.text


def test_a_signature_with_non_ascii_bytes_is_401_not_a_500(harness: Harness) -> None:
    """An unsigned sender's signature header with a byte past ASCII is a wrong signature."""
    number = harness.fake.add_issue(SLUG, "hooked", labels=[READY])
    body = json.dumps(harness.labelled(number, "alice")).encode()
    headers = webhook_headers(harness.fake.forge, EVENT[harness.fake.forge], "d-9", SECRET, body)
    forged = {
        k: (b"sha256=\xe9" if "signature" in k.lower() or "token" in k.lower() else v)
        for k, v in headers.items()
    }
    response = httpx.post(harness.url, content=body, headers=forged, timeout=5)
    assert response.status_code == 401, response.status_code
    assert harness.world.runs() == []


def test_untrusted_sender_gets_one_comment_then_polls_add_none(harness: Harness) -> None:
    """A delivery from a sender without write access is explained once, also across polls."""
    number = harness.fake.add_issue(SLUG, "sneaky", labels=[READY], labelled_by="mallory")
    assert harness.send(harness.labelled(number, "mallory")).status_code == 202
    deadline = time.monotonic() + 5
    while not untrusted_comments(harness.fake, number) and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(2):
        harness.world.intake.poll(harness.fake.forge)
    assert len(untrusted_comments(harness.fake, number)) == 1
    assert harness.world.runs() == []


def test_delivery_for_a_repo_not_enrolled_is_ignored(harness: Harness) -> None:
    """A valid delivery about a repo that is not enrolled is acknowledged and ignored."""
    number = harness.fake.add_issue(OTHER, "elsewhere", labels=[READY])
    response = harness.send(harness.labelled(number, "alice", slug=OTHER))
    assert response.status_code == 202 and response.json()["status"] == "ignored"
    assert harness.world.runs() == []


def test_github_form_encoded_delivery_queues_the_issue(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GitHub delivery sent as application/x-www-form-urlencoded (GitHub's default content
    type) is verified over its raw body and queues the issue like a JSON one."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with served("github", SLUG, writer="alice") as fake:
        with serving(fake, database_url, tmp_path / "volume") as harness:
            number = fake.add_issue(SLUG, "form-encoded", labels=[READY])
            payload = harness.labelled(number, "alice")
            forged = send_github_form_webhook(harness.url, "issues", payload, "not-the-secret")
            response = send_github_form_webhook(harness.url, "issues", payload, SECRET)
            runs = harness.wait_for_run()
    assert forged.status_code == 401
    assert response.status_code == 202, response.text
    assert response.json() == {"status": "accepted", "issue": number}
    assert [run.issue_number for run in runs] == [number]


def test_github_documented_test_vector_passes_the_signature_check(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub's published secret/payload/signature get past verification (then fail as not JSON)."""
    monkeypatch.setenv(SECRET_ENV, DOC_SECRET.decode())
    headers = {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "d-3",
        "X-Hub-Signature-256": DOC_SIGNATURE,
    }
    with FakeGitHub() as fake, serving(fake, database_url, tmp_path / "volume") as harness:
        response = httpx.post(harness.url, content=DOC_PAYLOAD, headers=headers, timeout=5)
        tampered = httpx.post(harness.url, content=DOC_PAYLOAD + b" ", headers=headers, timeout=5)
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]
    assert tampered.status_code == 401


def test_gitea_label_update_by_a_trusted_user_does_not_vouch_for_an_untrusted_label(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gitea's label_updated names any label editor, so the ready label's own adder is checked."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with FakeGitea() as fake, serving(fake, database_url, tmp_path / "volume") as harness:
        fake.set_permission(SLUG, "alice", "write")
        number = fake.add_issue(SLUG, "sneaky", labels=[READY], labelled_by="mallory")
        fake.apply_label(SLUG, number, "bug", "alice")  # alice edits labels afterwards
        assert harness.send(harness.labelled(number, "alice")).status_code == 202
        deadline = time.monotonic() + 5
        while not untrusted_comments(fake, number) and time.monotonic() < deadline:
            time.sleep(0.01)
        [comment] = untrusted_comments(fake, number)
        assert "@mallory" in comment
        assert harness.world.runs() == []


def test_a_replayed_trusted_delivery_does_not_vouch_for_a_later_untrusted_label(
    harness: Harness,
) -> None:
    """A delivery's body is signed but its delivery id is not: alice's old "labelled" body
    sent again under a new id, after mallory put the label back, names alice as the
    labeller. The forge says mallory added the label now in force, as a poll would read:
    nothing is queued and mallory is told, once."""
    fake = harness.fake
    number = fake.add_issue(SLUG, "once done", labels=[READY], labelled_by="alice")
    captured = harness.labelled(number, "alice")
    fake.unlabel(SLUG, number, READY, "alice")
    fake.apply_label(SLUG, number, READY, "mallory")
    assert harness.send(captured, delivery_id="fresh-id").status_code == 202
    deadline = time.monotonic() + 5
    while not untrusted_comments(fake, number) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert harness.world.runs() == []
    [comment] = untrusted_comments(fake, number)
    assert "@mallory" in comment


class MeetingTracker:
    """A tracker client whose first issue read, label-event read and (when the
    delivery names the labeller) permission read each wait until all of them
    have started: read one after another, they never meet and the barrier breaks."""

    def __init__(self, inner: Any, parties: int) -> None:
        self.inner = inner
        self.barrier = threading.Barrier(parties, timeout=60)
        self.met: list[str] = []

    def _meet(self, name: str) -> None:
        if name not in self.met:
            self.met.append(name)
            self.barrier.wait()

    def get_issue(self, slug: str, number: int) -> Any:
        self._meet("get_issue")
        return self.inner.get_issue(slug, number)

    def label_event(self, slug: str, number: int, label: str) -> Any:
        self._meet("label_event")
        return self.inner.label_event(slug, number, label)

    def is_trusted(self, slug: str, actor: str) -> bool:
        if self.barrier.parties == 3:
            self._meet("is_trusted")
        return bool(self.inner.is_trusted(slug, actor))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_webhook_reads_the_issue_and_its_label_at_once(harness: Harness) -> None:
    """The issue, its label event and the named labeller's permission are read
    concurrently (Gitea names no labeller: its permission is read after the event)."""
    forge = harness.fake.forge
    names = harness.world.intake.trackers
    [name] = list(names)
    meeting = MeetingTracker(names[name], 2 if forge == "gitea" else 3)
    harness.world.intake.trackers = {name: meeting}
    number = harness.fake.add_issue(SLUG, "hooked", labels=[READY])
    assert harness.send(harness.labelled(number, "alice")).status_code == 202
    runs = harness.wait_for_run(timeout_s=90)
    assert [run.issue_number for run in runs] == [number], meeting.met
    assert not meeting.barrier.broken
