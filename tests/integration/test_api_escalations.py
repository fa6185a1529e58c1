"""`GET /api/escalations` and `POST /api/escalations/{id}/ack`, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.api_harness import AUTH, ApiHarness, running_api

UNFREEZE_BETA = 'pipeline repos unfreeze beta --note "what you found and fixed"'


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    """Open escalations: a blocked run's (1), a budget's (2), a frozen repo's (3)."""
    with running_api(database_url, tmp_path) as harness:
        store = harness.store
        run = store.enqueue("alpha").run
        store.add_escalation("alpha", "blocked", "The agent asks: which colour?", run.id)
        store.add_escalation("alpha", "daily_budget", "alpha spent $5.00 today")
        store.freeze_repo("beta", "deploy broken", "carol", escalation="frozen by carol")
        yield harness


def listed(api: ApiHarness, query: str = "") -> dict[int, dict[str, object]]:
    answer = api.client.get(f"/api/escalations{query}")
    assert answer.status_code == 200, answer.text
    return {e["id"]: e for e in answer.json()["escalations"]}


def test_lists_open_escalations_with_the_next_step(api: ApiHarness) -> None:
    shown = listed(api)
    assert list(shown) == [1, 2, 3]
    assert shown[1]["repo"] == "alpha" and shown[1]["run_id"] == 1
    assert shown[1]["next_step"] == "pipeline runs retry 1"
    assert "pipeline escalations ack 2" in str(shown[2]["next_step"])
    assert shown[3]["next_step"] == UNFREEZE_BETA and shown[3]["of_freeze"] is True
    assert api.client.get("/api/escalations?show=some").status_code == 422


def test_ack_records_the_api_and_the_note(api: ApiHarness) -> None:
    answer = api.client.post("/api/escalations/1/ack", json={"note": "answered"}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    done = answer.json()
    assert done["acknowledged"] is True and done["acknowledged_by"] == "api: answered"
    assert done["next_step"] is None
    assert list(listed(api)) == [2, 3]
    assert listed(api, "?show=all")[1]["acknowledged_at"]
    again = api.client.post("/api/escalations/1/ack", json={}, headers=AUTH)
    assert again.status_code == 409
    assert "escalation 1: already acknowledged by api: answered" in again.json()["error"]


def test_refusals_name_the_cause(api: ApiHarness) -> None:
    frozen = api.client.post("/api/escalations/3/ack", json={}, headers=AUTH)
    assert frozen.status_code == 409
    assert "repo beta is still frozen; unfreeze it instead" in frozen.json()["error"]
    assert UNFREEZE_BETA in frozen.json()["error"]
    for path in ("/api/escalations/99/ack", "/api/escalations/99999999999/ack"):
        unknown = api.client.post(path, json={}, headers=AUTH)
        assert unknown.status_code == 404, unknown.text
    bad = api.client.post("/api/escalations/2/ack", json={"note": 5}, headers=AUTH)
    assert bad.status_code == 422
    assert list(listed(api)) == [1, 2, 3]


def test_a_note_too_long_for_its_record_is_422_with_the_limit(api: ApiHarness) -> None:
    """Recorded as "api: <note>" in 200 characters: a longer note was cut without a word."""
    for path, most in (("/api/escalations/1/ack", 195), ("/api/repos/beta/unfreeze", 195)):
        long = api.client.post(path, json={"note": "y" * (most + 1)}, headers=AUTH)
        assert long.status_code == 422, long.text
        assert long.json() == {"error": f"note: must be at most {most} characters", "field": "note"}
    assert list(listed(api)) == [1, 2, 3]
    fits = api.client.post("/api/escalations/1/ack", json={"note": "y" * 195}, headers=AUTH)
    assert fits.status_code == 200 and fits.json()["acknowledged_by"] == "api: " + "y" * 195
    spec = api.client.get("/openapi.json").json()["components"]["schemas"]
    assert spec["AckNoteRequest"]["properties"]["note"]["maxLength"] == 195
