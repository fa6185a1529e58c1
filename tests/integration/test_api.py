"""Read endpoints of the HTTP API against a real server and a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.http.app import create_app, serve
from pipeline.run.recovery import FIX_FORWARD_PRIORITY
from pipeline.store import EnqueueOptions, Store
from tests.integration.api_harness import OWNER, ApiHarness, make_settings, running_api


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    with running_api(database_url, tmp_path) as harness:
        yield harness


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_health_reports_load_and_capacity(api: ApiHarness) -> None:
    """/health is 200 with active, queued, capacity, busy and frozen repos."""
    api.store.enqueue("alpha")
    api.store.enqueue("beta")
    api.claim()
    api.store.freeze_repo("beta", "broken deploy", "test")
    resp = api.client.get("/health")
    assert resp.status_code == 200
    assert resp.json() == {
        "status": "ok",
        "database": "ok",
        "busy": False,
        "active": 1,
        "queued": 1,
        "capacity": 10,
        "frozen_repos": ["beta"],
    }


def test_health_busy_when_active_reaches_capacity(database_url: str, tmp_path: Path) -> None:
    """busy is true once the active runs reach max_concurrency."""
    with running_api(database_url, tmp_path, max_concurrency=1) as api:
        api.store.enqueue("alpha")
        api.claim()
        body = api.client.get("/health").json()
    assert body["busy"] is True and body["active"] == 1 and body["capacity"] == 1


def test_health_extra_adds_fields_and_can_degrade(sqlite_url: str, tmp_path: Path) -> None:
    """health_extra adds its keys; status 'degraded' from it degrades but stays 200."""
    extra = {"status": "degraded", "draining": True, "active": 99}
    with running_api(sqlite_url, tmp_path, app_kwargs={"health_extra": lambda: extra}) as api:
        resp = api.client.get("/health")
    body = resp.json()
    assert resp.status_code == 200
    assert body["status"] == "degraded" and body["draining"] is True and body["active"] == 0


def test_health_503_when_database_unreachable(tmp_path: Path) -> None:
    """/health answers 503 with database 'unreachable' when the database is down."""
    url = "postgresql://nobody@127.0.0.1:1/none"
    store = Store(url)
    handle = serve(create_app(store, make_settings(url, tmp_path)))
    try:
        import httpx

        resp = httpx.get(handle.url + "/health", timeout=10)
        metrics = httpx.get(handle.url + "/metrics", timeout=10)
    finally:
        handle.stop()
        store.close()
    assert resp.status_code == 503
    assert resp.json()["status"] == "degraded" and resp.json()["database"] == "unreachable"
    assert samples(metrics.text)[("pipeline_database_up", ())] == 0.0


def test_metrics_reflect_store_and_counters(api: ApiHarness) -> None:
    """/metrics has runs by state, queue depth, per-repo durations and spend, poll errors,
    rejections."""
    api.store.enqueue("alpha")
    api.store.enqueue("beta")
    api.store.enqueue("beta")
    run = api.claim()
    api.finish(run, tokens_in=1200, tokens_out=300, cost_usd=0.25)
    metrics = api.handle.app.state.metrics
    metrics.poll_error("gh")
    metrics.poll_error("gh")
    metrics.webhook_rejected("gh", "signature")
    resp = api.client.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    got = samples(resp.text)
    assert got[("pipeline_runs", (("state", "succeeded"),))] == 1
    assert got[("pipeline_runs", (("state", "queued"),))] == 2
    assert got[("pipeline_runs", (("state", "failed"),))] == 0
    assert got[("pipeline_queue_depth", (("repo", "alpha"),))] == 0
    assert got[("pipeline_queue_depth", (("repo", "beta"),))] == 2
    alpha, beta = ("repo", "alpha"), ("repo", "beta")
    assert got[("pipeline_run_duration_seconds_count", (alpha,))] == 1
    assert got[("pipeline_run_duration_seconds_bucket", (("le", "+Inf"), alpha))] == 1
    assert got[("pipeline_run_duration_seconds_bucket", (("le", "30"), alpha))] == 1
    assert got[("pipeline_run_duration_seconds_count", (beta,))] == 0
    assert got[("pipeline_agent_cost_usd_total", (alpha,))] == pytest.approx(0.25)
    assert got[("pipeline_agent_cost_usd_total", (beta,))] == 0
    assert got[("pipeline_agent_tokens_total", (("direction", "in"), alpha))] == 1200
    assert got[("pipeline_agent_tokens_total", (("direction", "out"), alpha))] == 300
    assert got[("pipeline_agent_tokens_total", (("direction", "in"), beta))] == 0
    assert got[("pipeline_poll_errors_total", (("tracker", "gh"),))] == 2
    key = ("pipeline_webhooks_rejected_total", (("reason", "signature"), ("tracker", "gh")))
    assert got[key] == 1
    assert got[("pipeline_capacity", ())] == 10


def test_runs_list_filters_and_pages(api: ApiHarness) -> None:
    """/api/runs filters by repo, state, kind and since, and pages with a total."""
    for _ in range(3):
        api.store.enqueue("alpha")
    api.store.enqueue("beta", EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY))
    everything = api.client.get("/api/runs").json()
    assert everything["total"] == 4 and [r["id"] for r in everything["runs"]] == [4, 3, 2, 1]
    page = api.client.get("/api/runs", params={"repo": "alpha", "limit": 2, "offset": 1}).json()
    assert page["total"] == 3 and [r["id"] for r in page["runs"]] == [2, 1]
    assert page["limit"] == 2 and page["offset"] == 1
    fixes = api.client.get("/api/runs", params={"kind": "fix_forward"}).json()
    assert [r["repo"] for r in fixes["runs"]] == ["beta"]
    assert api.client.get("/api/runs", params={"state": "succeeded"}).json()["total"] == 0
    future = api.client.get("/api/runs", params={"since": "2999-01-01T00:00:00Z"}).json()
    assert future["total"] == 0
    past = api.client.get("/api/runs", params={"since": "2000-01-01T00:00:00+02:00"}).json()
    assert past["total"] == 4
    assert api.client.get("/api/runs", params={"since": "2000-01-01"}).json()["total"] == 4


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "many"}, "limit"),
        ({"limit": 0}, "limit"),
        ({"offset": -1}, "offset"),
        ({"state": "sleeping"}, "state"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-01-32"}, "since"),
        ({"since": ""}, "since"),
        ({"since": "0001-01-01T00:00:00+05:00"}, "since"),
        ({"since": "2026-02-30T00:00:00Z"}, "since"),
        ({"repo": "a\x00b"}, "repo"),
        ({"text": "a\nb"}, "text"),
    ],
)
def test_runs_list_rejects_bad_parameters(
    sqlite_url: str, tmp_path: Path, params: dict[str, Any], field: str
) -> None:
    """A malformed query parameter is a 422 whose message names the parameter."""
    with running_api(sqlite_url, tmp_path) as api:
        resp = api.client.get("/api/runs", params=params)
    assert resp.status_code == 422
    assert resp.json()["field"] == field and resp.json()["error"].startswith(field + ":")


def test_run_detail_has_events_and_log(api: ApiHarness) -> None:
    """/api/runs/{id} returns the run with its events; /log is a plain-text timeline."""
    api.store.enqueue("alpha")
    run = api.finish(api.claim(), cost_usd=0.5)
    detail = api.client.get(f"/api/runs/{run.id}").json()
    assert detail["state"] == "succeeded" and detail["repo"] == "alpha"
    assert detail["cost_usd"] == 0.5 and detail["terminal"] is True
    assert detail["created_at"].endswith("Z")
    kinds = [e["kind"] for e in detail["events"]]
    assert kinds == ["queued", "claimed", "state", "test", "state"]
    assert detail["events"][3]["data"] == {"tail": "3 passed in 0.1s"}
    log = api.client.get(f"/api/runs/{run.id}/log")
    assert log.headers["content-type"].startswith("text/plain")
    assert log.text.startswith(f"run {run.id} (issue) alpha\nstate succeeded")
    assert "tests passed" in log.text and log.text.count("\n") == 8


def test_the_plain_text_log_cannot_steer_a_terminal(api: ApiHarness) -> None:
    """/log is read with curl in a terminal: escape sequences in run text come out escaped,
    a message's later lines indented under it, never taken for timeline lines."""
    from pipeline.core.states import RunState

    api.store.enqueue("alpha")
    run = api.claim()
    api.store.transition(run.id, OWNER, run.attempt, RunState.IMPLEMENTING)
    forged = "ok\n2026-01-01 10:00:00  #1 state    succeeded\x1b]0;owned\x07\x1b[2J\rX"
    api.store.append_event_fenced(run.id, OWNER, run.attempt, "agent", forged, {})
    api.store.finish(run.id, OWNER, run.attempt, "failed", error="boom\x1b[8m\u202e")

    log = api.client.get(f"/api/runs/{run.id}/log").text

    assert not any(c in log for c in "\x1b\x07\r\u202e")
    assert "succeeded\\x1b]0;owned\\x07\\x1b[2J\\x0dX" in log
    assert "boom\\x1b[8m\\u202e" in log
    agent = next(line for line in log.splitlines() if line.endswith(" agent    ok"))
    indent = " " * (len(agent) - len("ok"))
    assert f"\n{indent}2026-01-01 10:00:00  #1 state" in log  # under the message, not a line


@pytest.mark.parametrize(
    "path", ["/api/runs/999", "/api/runs/99999999999999999999", "/api/runs/999/log", "/api/runs/0"]
)
def test_unknown_run_is_404(sqlite_url: str, tmp_path: Path, path: str) -> None:
    """A run id that does not exist (or cannot) answers 404 with a JSON error."""
    with running_api(sqlite_url, tmp_path) as api:
        resp = api.client.get(path)
    assert resp.status_code == 404 and "does not exist" in resp.json()["error"]


def test_repos_list_has_frozen_state_and_queue(api: ApiHarness) -> None:
    """/api/repos lists repos with state, frozen reason and queued count."""
    api.store.enqueue("beta")
    api.store.freeze_repo("beta", "deploy broken", "recovery")
    repos = {r["name"]: r for r in api.client.get("/api/repos").json()["repos"]}
    assert repos["alpha"]["frozen"] is False and repos["alpha"]["queued"] == 0
    assert repos["beta"]["frozen"] is True and repos["beta"]["queued"] == 1
    assert repos["beta"]["frozen_reason"] == "deploy broken"
    assert repos["beta"]["frozen_by"] == "recovery" and repos["beta"]["slug"] == "org/beta"


def test_openapi_is_valid_and_api_points_to_it(sqlite_url: str, tmp_path: Path) -> None:
    """/openapi.json validates against the OpenAPI 3.0 schema; /api links to it."""
    from schemathesis.specs.openapi.definitions import OPENAPI_30

    with running_api(sqlite_url, tmp_path) as api:
        doc = api.client.get("/openapi.json").json()
        index = api.client.get("/api").json()
    jsonschema_rs.Draft4Validator(OPENAPI_30).validate(doc)
    assert doc["openapi"].startswith("3.") and "/api/runs/{run_id}/cancel" in doc["paths"]
    assert index["openapi"] == "/openapi.json"


def test_webhook_is_delegated_to_the_handler(sqlite_url: str, tmp_path: Path) -> None:
    """POST /webhooks/{tracker} passes tracker, lower-cased headers and raw body through."""
    seen: list[tuple[str, dict[str, str], bytes]] = []

    def handler(tracker: str, headers: Any, body: bytes) -> tuple[int, dict[str, object]]:
        seen.append((tracker, dict(headers), body))
        return 202, {"accepted": True}

    with running_api(sqlite_url, tmp_path, app_kwargs={"webhook_handler": handler}) as api:
        resp = api.client.post(
            "/webhooks/gh", content=b'{"x":1}', headers={"X-Hub-Signature-256": "sha256=abc"}
        )
    assert resp.status_code == 202 and resp.json() == {"accepted": True}
    tracker, headers, body = seen[0]
    assert tracker == "gh" and body == b'{"x":1}'
    assert headers["x-hub-signature-256"] == "sha256=abc"


def test_webhook_without_intake_is_404(sqlite_url: str, tmp_path: Path) -> None:
    """Without a webhook handler the webhook route answers 404."""
    with running_api(sqlite_url, tmp_path) as api:
        resp = api.client.post("/webhooks/gh", content=b"{}")
    assert resp.status_code == 404 and "gh" in resp.json()["error"]
