"""Finding runs and acting on several: time and text filters, saved views, batch retry/cancel."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from pipeline.store import EnqueueOptions, SeenIssue, Store
from pipeline.store.models import RunRow
from tests.integration.api_harness import AUTH, OWNER, ApiHarness, running_api

BATCH = "/api/runs/batch"


def backdate(store: Store, run_id: int, hours: float) -> None:
    """Move a run's creation (and last update) ``hours`` into the past."""
    when = store.now() - timedelta(hours=hours)
    with store.engine.begin() as conn:
        conn.execute(
            update(RunRow).where(RunRow.id == run_id).values(created_at=when, updated_at=when)
        )


def issue_run(api: ApiHarness, repo: str, number: int, title: str) -> int:
    issue = api.store.upsert_issue(
        repo, SeenIssue(tracker="gh", number=number, title=title, author="a", url="u")
    )
    return api.store.enqueue(repo, EnqueueOptions(issue_id=issue.id)).run.id


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    """Runs 1..4: alpha 'Login page crashes' failed 30 h ago with a TLS error; alpha
    'Add CSV_export' failed 2 h ago; beta 'Dark mode' running; beta manual queued 10 d ago."""
    with running_api(database_url, tmp_path) as harness:
        issue_run(harness, "alpha", 1, "Login page crashes")
        harness.finish(harness.claim(), "failed")
        with harness.store.engine.begin() as conn:
            conn.execute(
                update(RunRow).where(RunRow.id == 1).values(error="TLS Handshake timed out")
            )
        issue_run(harness, "alpha", 2, "Add CSV_export")
        harness.finish(harness.claim(), "failed")
        issue_run(harness, "beta", 3, "Dark mode")
        harness.claim()
        harness.store.enqueue("beta")
        backdate(harness.store, 1, 30)
        backdate(harness.store, 2, 2)
        backdate(harness.store, 4, 240)
        yield harness


def ids(api: ApiHarness, **params: Any) -> list[int]:
    answer = api.client.get("/api/runs", params=params)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    found = [r["id"] for r in body["runs"]]
    assert body["total"] == len(found)
    return found


def test_time_filters_take_ages_and_iso_times(api: ApiHarness) -> None:
    """since/until accept ages (24h, 7d), ISO times and today; until is exclusive."""
    assert ids(api, since="24h") == [3, 2]
    assert ids(api, since="7d") == [3, 2, 1]
    assert ids(api, until="24h") == [4, 1]
    assert ids(api, since="7d", until="24h") == [1]
    assert ids(api, since="2w", until="1h") == [4, 2, 1]
    assert ids(api, since="1h", until="2w") == []  # an empty window is an empty list
    cut = (api.store.now() - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ids(api, since=cut) == [3, 2]
    assert ids(api, until=cut) == [4, 1]
    assert set(ids(api, since="today")) >= {3}


def test_text_matches_title_repo_and_error_in_any_case(api: ApiHarness) -> None:
    """text finds the issue title, the repo name or the error, ignoring case."""
    assert ids(api, text="LOGIN") == [1]
    assert ids(api, text="handshake") == [1]
    assert ids(api, text="Beta") == [4, 3]
    assert ids(api, text="csv_") == [2]
    assert ids(api, text="csv%") == []  # % and _ are literal, not wildcards
    assert ids(api, text="nothing like it") == []


def test_filters_combine_with_state_repo_and_repo_state(api: ApiHarness) -> None:
    """The new filters narrow alongside state and repo; repo_state picks frozen repos' runs."""
    assert ids(api, state="failed", since="24h") == [2]
    assert ids(api, repo="alpha", text="a") == [2, 1]
    assert ids(api, repo_state="frozen") == []
    api.store.freeze_repo("beta", "deploy broken", "test")
    assert ids(api, repo_state="frozen") == [4, 3]
    assert ids(api, repo_state="active", state="failed") == [2, 1]


@pytest.mark.parametrize(
    ("params", "field", "valid"),
    [
        ({"since": "yesterday"}, "since", "24h"),
        ({"since": "5x"}, "since", "7d"),
        ({"until": "2026-13-01"}, "until", "2026-01-31T08:00:00Z"),
        ({"text": "a\x01b"}, "text", "control characters"),
        ({"text": "x" * 201}, "text", "at most 200"),
        ({"repo_state": "melted"}, "repo_state", "active, frozen"),
        ({"kind": "bogus"}, "kind", "issue, fix_forward"),
    ],
)
def test_bad_filters_name_the_parameter_and_valid_forms(
    sqlite_url: str, tmp_path: Path, params: dict[str, str], field: str, valid: str
) -> None:
    """A bad since/until/text/repo_state/kind is a 422 naming the parameter and what is valid."""
    with running_api(sqlite_url, tmp_path) as api:
        answer = api.client.get("/api/runs", params=params)
    assert answer.status_code == 422
    body = answer.json()
    assert body["field"] == field and body["error"].startswith(f"{field}:")
    assert valid in body["error"]


def test_an_unknown_repo_is_a_404_naming_the_known_ones(sqlite_url: str, tmp_path: Path) -> None:
    """A repo filter naming no repo is answered in words, in the API and the dashboard alike."""
    with running_api(sqlite_url, tmp_path) as api:
        answer = api.client.get("/api/runs", params={"repo": "nosuch"})
        page = api.client.get("/", params={"repo": "nosuch"})
        known = api.client.get("/api/runs", params={"repo": "alpha"})
    assert answer.status_code == 404
    assert answer.json() == {
        "error": "repo: no such repo 'nosuch' (known: alpha, beta)",
        "field": "repo",
    }
    assert page.status_code == 404 and "no such repo" in page.text
    assert known.status_code == 200


def test_batch_retry_reports_each_run(api: ApiHarness) -> None:
    """Retrying failed, running and unknown runs: each answered, only the failed ones queued."""
    answer = api.client.post(
        BATCH, json={"action": "retry", "runs": [1, 3, 2, 999, 1]}, headers=AUTH
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    results = {r["run_id"]: r for r in body["results"]}
    assert [r["run_id"] for r in body["results"]] == [1, 3, 2, 999]  # once each, in order
    assert results[1]["outcome"] == "retried" and results[2]["outcome"] == "retried"
    assert results[3] == {
        "run_id": 3,
        "ok": False,
        "outcome": "refused",
        "message": "run 3 is preparing; only failed, escalated, cancelled runs can be retried",
    }
    assert results[999]["outcome"] == "not_found" and not results[999]["ok"]
    assert body["done"] == 2 and body["refused"] == 2
    for old in (1, 2):
        new = api.store.get_run(results[old]["run"]["id"])
        assert new is not None and new.state == "queued" and new.requested_by == "api"
    assert api.store.count_runs() == 6


def test_batch_cancel_reports_each_run(api: ApiHarness) -> None:
    """Cancel ends a queued run, flags a busy one and refuses one that already ended."""
    answer = api.client.post(BATCH, json={"action": "cancel", "runs": [4, 3, 1]}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    outcomes = [(r["run_id"], r["ok"], r["outcome"]) for r in answer.json()["results"]]
    assert outcomes == [
        (4, True, "cancelled"),
        (3, True, "cancel_requested"),
        (1, False, "refused"),
    ]
    assert "already ended (failed)" in answer.json()["results"][2]["message"]
    queued, busy = api.store.get_run(4), api.store.get_run(3)
    assert queued is not None and queued.state == "cancelled"
    assert busy is not None and busy.cancel_requested and busy.owner == OWNER


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "delete", "runs": [1]}, "action"),
        ({"runs": [1]}, "action"),
        ({"action": "retry", "runs": []}, "runs"),
        ({"action": "retry", "runs": "1,2"}, "runs"),
        ({"action": "retry", "runs": list(range(1, 102))}, "runs"),
        ({"action": "retry", "runs": [1, "2"]}, "runs[1]"),
        ({"action": "retry", "runs": [0]}, "runs[0]"),
        ({"action": "retry", "runs": [1], "force": True}, "force"),
    ],
)
def test_batch_bad_body_is_422_naming_the_field(
    sqlite_url: str, tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    """A malformed batch request changes nothing and names the field."""
    with running_api(sqlite_url, tmp_path) as api:
        api.store.enqueue("alpha")
        answer = api.client.post(BATCH, json=body, headers=AUTH)
        runs = api.store.count_runs()
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field and runs == 1


def test_batch_from_a_signed_in_page_needs_the_csrf_token(api: ApiHarness) -> None:
    """A write session may batch with the page's CSRF token; the cookie alone is refused."""
    csrf = api.sign_in()
    for headers in ({}, {"X-CSRF-Token": "0" * 32}):
        refused = api.client.post(BATCH, json={"action": "retry", "runs": [1]}, headers=headers)
        assert refused.status_code == 401
    assert api.store.count_runs() == 4
    done = api.client.post(
        BATCH,
        json={"action": "retry", "runs": [1]},
        headers={"X-CSRF-Token": csrf, "Origin": api.url},
    )
    assert done.status_code == 200 and done.json()["done"] == 1
    assert api.store.count_runs() == 5


@pytest.mark.parametrize(
    "headers", [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}]
)
def test_batch_from_a_foreign_origin_is_refused(api: ApiHarness, headers: dict[str, str]) -> None:
    """A cross-site batch is 403 even with a valid session and CSRF token; nothing changes."""
    csrf = api.sign_in()
    answer = api.client.post(
        BATCH,
        json={"action": "cancel", "runs": [3, 4]},
        headers={**headers, "X-CSRF-Token": csrf},
    )
    assert answer.status_code == 403 and "cross-site" in answer.json()["error"]
    run = api.store.get_run(4)
    assert run is not None and run.state == "queued" and api.store.count_runs() == 4
