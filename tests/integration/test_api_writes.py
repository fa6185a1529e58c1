"""Write endpoints of the HTTP API: bearer token, enqueue, 429, cancel, retry, freeze."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.store import EnqueueOptions, SeenIssue
from tests.integration.api_harness import AUTH, TOKEN, ApiHarness, running_api

WRITES = [
    ("/api/runs", {"repo": "alpha"}),
    ("/api/runs/1/cancel", None),
    ("/api/runs/1/retry", None),
    ("/api/runs/batch", {"action": "cancel", "runs": [1]}),
    ("/api/repos/alpha/freeze", {"note": "x"}),
    ("/api/repos/alpha/unfreeze", {"note": "x"}),
    ("/api/escalations/1/ack", {"note": "x"}),
]


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    with running_api(database_url, tmp_path) as harness:
        harness.store.enqueue("alpha")
        yield harness


@pytest.mark.parametrize(("path", "body"), WRITES)
@pytest.mark.parametrize("header", [None, "Bearer wrong-token", TOKEN, f"Basic {TOKEN}"])
def test_writes_need_the_bearer_token(
    sqlite_url: str, tmp_path: Path, path: str, body: Any, header: str | None
) -> None:
    """Every write answers 401 without the right bearer token and changes nothing."""
    headers = {"Authorization": header} if header else {}
    with running_api(sqlite_url, tmp_path) as api:
        api.store.enqueue("alpha")
        resp = api.client.post(path, json=body, headers=headers)
        runs = api.store.count_runs()
        repo = api.store.get_repo("alpha")
    assert resp.status_code == 401, resp.text
    assert "Bearer" in resp.json()["error"]
    assert resp.headers["www-authenticate"].startswith("Bearer")
    assert runs == 1 and repo is not None and not repo.frozen


@pytest.mark.parametrize(("path", "body"), WRITES)
def test_writes_refused_when_no_token_is_configured(
    sqlite_url: str, tmp_path: Path, path: str, body: Any
) -> None:
    """With no api_token configured, writes are 403 with how to configure one."""
    with running_api(sqlite_url, tmp_path, token=False) as api:
        resp = api.client.post(path, json=body, headers=AUTH)
    assert resp.status_code == 403
    assert "api_token_env" in resp.json()["error"]


def _seen(api: ApiHarness, repo: str, *numbers: int) -> None:
    for number in numbers:
        api.store.upsert_issue(
            repo, SeenIssue(tracker="gh", number=number, title="Fix it", author="a", url="u")
        )


def test_enqueue_returns_202_with_the_run(api: ApiHarness) -> None:
    """POST /api/runs queues a run for the repo's issue and answers 202 with it."""
    _seen(api, "beta", 4)
    body = {"repo": "beta", "issue": 4, "priority": 5}
    resp = api.client.post("/api/runs", json=body, headers=AUTH)
    assert resp.status_code == 202
    run = resp.json()
    assert run["repo"] == "beta" and run["state"] == "queued" and run["priority"] == 5
    assert run["issue_number"] == 4 and run["kind"] == "issue"
    assert run["created"] is True and run["requested_by"] == "api"
    stored = api.store.get_run(run["id"])
    assert stored is not None and stored.repo_name == "beta"


def test_enqueue_an_issue_dedupes_on_the_active_run(api: ApiHarness) -> None:
    """Enqueueing a known issue twice gives 202 then 200 with the same run."""
    api.store.upsert_issue(
        "alpha", SeenIssue(tracker="gh", number=12, title="Fix it", author="a", url="u")
    )
    first = api.client.post("/api/runs", json={"repo": "alpha", "issue": 12}, headers=AUTH)
    again = api.client.post("/api/runs", json={"repo": "alpha", "issue": 12}, headers=AUTH)
    assert first.status_code == 202 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    assert first.json()["issue_number"] == 12 and again.json()["created"] is False


def test_enqueue_of_an_issue_whose_run_pushed_watches_that_commit(api: ApiHarness) -> None:
    """The issue's last run pushed, then escalated: the API's new run carries the pushed
    commit (it watches it again, as a retry does) instead of implementing the issue again."""
    _seen(api, "beta", 7)
    issue = api.store.find_issue("beta", 7)
    assert issue is not None
    old = api.store.enqueue("beta", EnqueueOptions(issue_id=issue.id)).run
    alpha = api.store.get_repo("alpha")
    assert alpha is not None  # its run, queued by the fixture, stays queued
    claimed = api.store.claim_next("w1", max_concurrency=5, lease_s=30, exclude_repo_ids=[alpha.id])
    assert claimed is not None and claimed.id == old.id
    api.store.update_run(old.id, "w1", 1, pushed_sha="a" * 40, base_sha="b" * 40)
    api.store.finish(old.id, "w1", 1, "escalated", error_class="deploy_inconclusive", error="x")
    resp = api.client.post("/api/runs", json={"repo": "beta", "issue": 7}, headers=AUTH)
    assert resp.status_code == 202, resp.text
    assert resp.json()["pushed_sha"] == "a" * 40
    new = api.store.get_run(resp.json()["id"])
    assert new is not None and (new.pushed_sha, new.base_sha) == ("a" * 40, "b" * 40)


def test_enqueue_unknown_repo_or_issue_is_404(api: ApiHarness) -> None:
    """An unknown repo, or an issue intake never saw, answers 404 naming it."""
    repo = api.client.post("/api/runs", json={"repo": "nope", "issue": 1}, headers=AUTH)
    issue = api.client.post("/api/runs", json={"repo": "alpha", "issue": 77}, headers=AUTH)
    assert repo.status_code == 404 and "'nope'" in repo.json()["error"]
    assert issue.status_code == 404 and "#77" in issue.json()["error"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"", "repo"),
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (b'{"issue": 3}', "repo"),
        (b'{"repo": 7}', "repo"),
        (b'{"repo": ""}', "repo"),
        (b'{"repo": "alpha", "priority": "high"}', "priority"),
        (b'{"repo": "alpha", "priority": true}', "priority"),
        (b'{"repo": "alpha", "priority": 5000}', "priority"),
        (b'{"repo": "alpha", "issue": 0}', "issue"),
        (b'{"repo": "alpha"}', "issue"),  # a run without an issue would have no task
        (b'{"repo": "alpha", "issue": null}', "issue"),
        (b'{"repo": "alpha", "colour": "red"}', "colour"),
        (b'{"repo": "al\\ud800pha"}', "repo"),
        (b'{"repo": "alpha", "x": "' + b"y" * 70_000 + b'"}', "body"),
        (b"[" * 50_000, "body"),  # nested past the JSON parser's recursion limit
        (b'{"repo":' * 5_000, "body"),
    ],
)
def test_enqueue_bad_body_is_422_naming_the_field(
    sqlite_url: str, tmp_path: Path, body: bytes, field: str
) -> None:
    """A malformed body is a 422 whose message names the offending field."""
    with running_api(sqlite_url, tmp_path) as api:
        resp = api.client.post(
            "/api/runs", content=body, headers={**AUTH, "Content-Type": "application/json"}
        )
    assert resp.status_code == 422, resp.text
    assert resp.json()["field"] == field and resp.json()["error"].startswith(field + ":")


def test_enqueue_when_queue_full_is_429_with_retry_after(sqlite_url: str, tmp_path: Path) -> None:
    """At max_queue_depth, POST /api/runs answers 429 with Retry-After and queues nothing."""
    with running_api(sqlite_url, tmp_path, max_queue_depth=2) as api:
        _seen(api, "alpha", 1, 2, 3)
        codes = [
            api.client.post("/api/runs", json={"repo": "alpha", "issue": n}, headers=AUTH)
            for n in (1, 2, 3)
        ]
        total = api.store.count_runs()
    assert [r.status_code for r in codes] == [202, 202, 429]
    full = codes[2]
    assert int(full.headers["retry-after"]) >= 1
    assert full.json()["depth"] == 2 and full.json()["limit"] == 2
    assert "max_queue_depth" in full.json()["error"] and total == 2


def test_cancel_ends_a_queued_run(api: ApiHarness) -> None:
    """POST /api/runs/{id}/cancel cancels a queued run and returns it."""
    resp = api.client.post("/api/runs/1/cancel", headers=AUTH)
    assert resp.status_code == 200 and resp.json()["state"] == "cancelled"
    again = api.client.post("/api/runs/1/cancel", headers=AUTH)
    assert again.status_code == 200 and again.json()["state"] == "cancelled"


def test_cancel_flags_a_busy_run(api: ApiHarness) -> None:
    """Cancelling a busy run asks its worker to stop: cancel_requested, state unchanged."""
    api.claim()
    resp = api.client.post("/api/runs/1/cancel", headers=AUTH)
    assert resp.status_code == 200
    assert resp.json()["state"] == "preparing" and resp.json()["cancel_requested"] is True


def test_retry_queues_a_new_run_and_409_when_not_finished(api: ApiHarness) -> None:
    """Retry of a queued run is 409; after cancelling it, retry answers 202 with a new run."""
    early = api.client.post("/api/runs/1/retry", headers=AUTH)
    assert early.status_code == 409 and "queued" in early.json()["error"]
    api.client.post("/api/runs/1/cancel", headers=AUTH)
    resp = api.client.post("/api/runs/1/retry", headers=AUTH)
    assert resp.status_code == 202
    assert resp.json()["id"] == 2 and resp.json()["state"] == "queued"


@pytest.mark.parametrize("action", ["cancel", "retry"])
def test_actions_on_unknown_runs_are_404(api: ApiHarness, action: str) -> None:
    """Cancel or retry of a run that does not exist is 404."""
    for run_id in (99, 0, 10**20):
        resp = api.client.post(f"/api/runs/{run_id}/{action}", headers=AUTH)
        assert resp.status_code == 404, (run_id, resp.text)


def test_freeze_and_unfreeze_a_repo(api: ApiHarness) -> None:
    """Freeze then unfreeze a repo with notes; repeating reports changed=false."""
    frozen = api.client.post(
        "/api/repos/alpha/freeze", json={"note": "deploys flaky"}, headers=AUTH
    )
    assert frozen.status_code == 200
    assert frozen.json()["frozen"] is True and frozen.json()["changed"] is True
    assert frozen.json()["frozen_reason"] == "deploys flaky"
    twice = api.client.post("/api/repos/alpha/freeze", headers=AUTH)
    assert twice.status_code == 200 and twice.json()["changed"] is False
    thawed = api.client.post(
        "/api/repos/alpha/unfreeze", json={"note": "fixed by hand"}, headers=AUTH
    )
    assert thawed.status_code == 200 and thawed.json()["frozen"] is False
    escalations = api.store.list_escalations("alpha")
    assert escalations[0].acknowledged_by == "api: fixed by hand"


def test_freeze_unknown_repo_is_404_and_bad_note_422(api: ApiHarness) -> None:
    """Freezing an unknown repo is 404; a non-string note is 422 naming 'note'."""
    missing = api.client.post("/api/repos/zeta/freeze", json={"note": "x"}, headers=AUTH)
    surrogate = api.client.post(
        "/api/repos/alpha/freeze", content=b'{"note": "\\udfff"}', headers=AUTH
    )
    assert surrogate.status_code == 422 and surrogate.json()["field"] == "note"
    bad = api.client.post("/api/repos/alpha/freeze", json={"note": 5}, headers=AUTH)
    assert missing.status_code == 404 and "'zeta'" in missing.json()["error"]
    assert bad.status_code == 422 and bad.json()["field"] == "note"


def test_retry_in_a_frozen_repo_says_it_waits_for_an_unfreeze(api: ApiHarness) -> None:
    """A retry in a frozen repo is queued (202) with a note naming the freeze and the
    unfreeze; the batch retry's message says the same; unfrozen, the note is null."""
    api.client.post("/api/runs/1/cancel", headers=AUTH)
    api.client.post("/api/repos/alpha/freeze", json={"note": "deploy broken"}, headers=AUTH)
    resp = api.client.post("/api/runs/1/retry", headers=AUTH)
    assert resp.status_code == 202
    note = resp.json()["note"]
    assert "repo alpha is frozen" in note and "pipeline repos unfreeze alpha" in note
    api.client.post("/api/runs/2/cancel", headers=AUTH)
    batch = api.client.post(
        "/api/runs/batch", json={"action": "retry", "runs": [2]}, headers=AUTH
    ).json()
    [result] = batch["results"]
    assert result["outcome"] == "retried" and "repo alpha is frozen" in result["message"]
    page = api.client.get(f"/runs/{result['run']['id']}")
    assert "repo alpha is frozen" in page.text
    api.client.post("/api/repos/alpha/unfreeze", json={"note": "fixed"}, headers=AUTH)
    api.client.post(f"/api/runs/{result['run']['id']}/cancel", headers=AUTH)
    again = api.client.post(f"/api/runs/{result['run']['id']}/retry", headers=AUTH)
    assert again.status_code == 202 and again.json()["note"] is None
