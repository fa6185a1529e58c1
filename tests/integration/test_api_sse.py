"""GET /api/events: server-sent events read with httpx from a real uvicorn."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from pipeline.http.app import AppOptions, create_app, serve
from pipeline.http.sse import EVENT_MAPPING, event_name
from pipeline.store import RunEvent, SeenIssue, Store
from tests.integration.api_harness import (
    AUTH,
    ApiHarness,
    SseReader,
    make_settings,
    running_api,
)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    with running_api(database_url, tmp_path) as harness:
        yield harness


@contextmanager
def open_stream(api: ApiHarness, **headers: str) -> Iterator[SseReader]:
    """A connected stream (its first comment read), closed on exit."""
    with api.client.stream("GET", "/api/events", headers=headers) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(resp.iter_lines())
        reader.wait_comment("stream from event", timeout_s=5)
        yield reader


def test_events_arrive_in_order_with_names(api: ApiHarness) -> None:
    """A run's life arrives in order: queued, started, progress, succeeded; then cancelled."""
    api.store.upsert_issue(
        "alpha", SeenIssue(tracker="gh", number=1, title="Fix it", author="a", url="u")
    )
    with open_stream(api) as reader:
        body = {"repo": "alpha", "issue": 1}
        assert api.client.post("/api/runs", json=body, headers=AUTH).is_success
        api.store.enqueue("beta")
        api.finish(api.claim())
        api.client.post("/api/runs/2/cancel", headers=AUTH)
        got = reader.next_messages(7)
    assert [(m.event, m.data["run_id"]) for m in got] == [
        ("run.queued", 1),
        ("run.queued", 2),
        ("run.started", 1),
        ("run.progress", 1),
        ("run.progress", 1),
        ("run.succeeded", 1),
        ("run.cancelled", 2),
    ]
    ids = [m.id for m in got]
    assert ids == sorted(ids) and len(set(ids)) == 7
    assert all(m.id == m.data["id"] for m in got)
    assert got[3].data["state"] == "implementing" and got[5].data["state"] == "succeeded"
    assert got[4].data["kind"] == "test" and got[4].data["data"] == {"tail": "3 passed in 0.1s"}


def test_last_event_id_resumes_after_that_event(api: ApiHarness) -> None:
    """Reconnecting with Last-Event-ID (or ?after=) replays only later events."""
    for _ in range(3):
        api.store.enqueue("alpha")
    with open_stream(api, **{"Last-Event-ID": "1"}) as reader:
        resumed = reader.next_messages(2)
    assert [m.data["run_id"] for m in resumed] == [2, 3]
    with api.client.stream("GET", "/api/events", params={"after": 2}) as resp:
        after = SseReader(resp.iter_lines()).next_messages(1)
    assert after[0].data["run_id"] == 3


def test_new_client_starts_at_the_newest_event(api: ApiHarness) -> None:
    """Without Last-Event-ID a client sees only what happens after it connected."""
    api.store.enqueue("alpha")
    with open_stream(api) as reader:
        api.store.enqueue("beta")
        got = reader.next_messages(1)
    assert got[0].data["run_id"] == 2


def test_repo_freeze_events(api: ApiHarness) -> None:
    """Freezing and unfreezing a repo because of a run emit repo.frozen and repo.unfrozen."""
    run = api.store.enqueue("alpha").run
    with open_stream(api) as reader:
        api.store.freeze_repo("alpha", "deploy broken twice", "recovery", run_id=run.id)
        api.store.unfreeze_repo("alpha", "fixed", "ops")
        got = reader.next_messages(2)
    assert [m.event for m in got] == ["repo.frozen", "repo.unfrozen"]
    assert got[0].data["data"]["repo"] == "alpha"


def test_keep_alive_comments_while_idle(sqlite_url: str, tmp_path: Path) -> None:
    """An idle stream carries ': keep-alive' comments so proxies keep it open."""
    with running_api(sqlite_url, tmp_path) as api:
        with open_stream(api) as reader:
            reader.wait_comment("keep-alive", timeout_s=5)


@pytest.mark.parametrize("header", ["abc", "-1", "99999999999999"])
def test_bad_last_event_id_is_422(sqlite_url: str, tmp_path: Path, header: str) -> None:
    """A Last-Event-ID that is not an event id answers 422 naming the header."""
    with running_api(sqlite_url, tmp_path) as api:
        resp = api.client.get("/api/events", headers={"Last-Event-ID": header})
    assert resp.status_code == 422 and resp.json()["field"] == "Last-Event-ID"


def test_server_stop_ends_open_streams(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping the server ends open streams itself instead of waiting them out."""
    caplog.set_level(logging.WARNING, logger="uvicorn.error")
    with running_api(sqlite_url, tmp_path, app_kwargs={"sse_keepalive_s": 60}) as api:
        with open_stream(api) as reader:
            api.handle.stop()
            rest = list(reader.lines)  # returns only because the stream ended
            assert [line for line in rest if line] == []
    assert not api.handle.thread.is_alive()
    # Waiting streams out ends in uvicorn cancelling them when its graceful timeout runs out.
    assert not [r for r in caplog.records if "graceful shutdown exceeded" in r.getMessage()]


def test_client_disconnect_ends_the_stream(sqlite_url: str, tmp_path: Path) -> None:
    """When the client goes away the server drops the stream and its connection."""
    with running_api(sqlite_url, tmp_path) as api:
        state = api.handle.server.server_state
        with open_stream(api):
            assert len(state.tasks) == 1
        api.client.close()
        deadline = time.monotonic() + 5
        while state.tasks or state.connections:
            assert time.monotonic() < deadline, "stream still open after the client left"
            time.sleep(0.02)


MAPPING_CASES = [
    ("queued", {}, "run.queued"),
    ("claimed", {"owner": "w"}, "run.started"),
    ("state", {"state": "preparing"}, "run.started"),
    ("state", {"state": "queued", "sweep": True}, "run.queued"),
    ("state", {"state": "testing"}, "run.progress"),
    ("state", {"state": "retry_wait"}, "run.progress"),
    ("state", {"state": "succeeded"}, "run.succeeded"),
    ("state", {"state": "failed"}, "run.failed"),
    ("state", {"state": "cancelled"}, "run.cancelled"),
    ("state", {"state": "escalated"}, "run.escalated"),
    ("repo", {"frozen": True}, "repo.frozen"),
    ("repo", {"frozen": False}, "repo.unfrozen"),
    ("tool", {"name": "Edit"}, "run.progress"),
    ("ci", {}, "run.progress"),
]


@pytest.mark.parametrize(("kind", "data", "name"), MAPPING_CASES)
def test_event_names_follow_the_documented_mapping(
    kind: str, data: dict[str, object], name: str
) -> None:
    """Stored event kinds and states map to the documented SSE event names."""
    event = RunEvent(
        id=1, run_id=1, attempt=0, ts=datetime(2026, 1, 1), kind=kind, message="m", data=dict(data)
    )
    assert event_name(event) == name


def test_every_documented_event_name_is_produced() -> None:
    """Each name in EVENT_MAPPING (served in the OpenAPI description) has a mapping case."""
    assert {name for name, _ in EVENT_MAPPING} == {name for _, _, name in MAPPING_CASES}


class FailingStore(Store):
    """A real store whose event feed breaks once told to (a database outage)."""

    broken = False

    def events_since(self, after_id: int, limit: int = 500) -> list[RunEvent]:
        if self.broken:
            raise RuntimeError("database is down")
        return super().events_since(after_id, limit)


def test_stream_ends_cleanly_when_the_database_fails(sqlite_url: str, tmp_path: Path) -> None:
    """A store failure ends the stream with a comment, so the client reconnects and resumes."""
    store = FailingStore(sqlite_url)
    store.upgrade()
    handle = serve(
        create_app(store, make_settings(sqlite_url, tmp_path), AppOptions(sse_poll_s=0.05))
    )
    try:
        with (
            httpx.Client(base_url=handle.url, timeout=10) as client,
            client.stream("GET", "/api/events") as resp,
        ):
            lines = resp.iter_lines()
            assert next(lines) == "retry: 2000"
            store.broken = True
            rest = list(lines)
    finally:
        handle.stop()
        store.close()
    assert ": database unavailable, reconnect later" in rest


def test_live_streams_are_bounded(sqlite_url: str, tmp_path: Path) -> None:
    """Every open stream polls the database: past the limit a new one is 503 with Retry-After
    (not one more poller), and a stream that ends frees its place."""
    with running_api(sqlite_url, tmp_path, app_kwargs={"max_streams": 2}) as api:
        with open_stream(api), open_stream(api):
            with api.client.stream("GET", "/api/events") as refused:
                assert refused.status_code == 503, refused.status_code
                assert int(refused.headers["retry-after"]) >= 1
                assert "live event streams" in refused.read().decode()
        deadline = time.monotonic() + 10
        while True:
            with api.client.stream("GET", "/api/events") as again:
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "closed streams never freed their places"
            time.sleep(0.05)
