"""Property-based fuzzing of the HTTP API from its OpenAPI description.

schemathesis generates valid and invalid requests for every operation of the
description (the very document ``/openapi.json`` serves, checked below),
sends them with the bearer token to a live server on 127.0.0.1, and checks
each answer: never a 5xx, and status codes, content types and bodies as the
description declares. ``/api/events`` is left out: it never ends. Bounded to
a few dozen examples per operation (about half a minute in all).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from pipeline.http.openapi import openapi_description
from pipeline.store import EnqueueOptions, SeenIssue
from tests.integration.api_harness import AUTH, ApiHarness, running_api

pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 100


schema = schemathesis.openapi.from_dict(openapi_description()).exclude(path="/api/events")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiHarness]:
    """One live API for the module; its store has repos, runs and an issue."""
    tmp_path = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite:///{tmp_path / 'history.db'}"
    with running_api(url, tmp_path, max_queue_depth=50) as api:
        api.store.ensure_repo("demo")
        issue = api.store.upsert_issue(
            "demo",
            SeenIssue(
                tracker="gh", number=1, title="t", author="a", url="https://example.invalid/1"
            ),
        )
        api.store.enqueue("demo", EnqueueOptions(issue_id=issue.id))
        api.finish(api.claim(), cost_usd=0.1)
        api.store.enqueue("alpha")
        api.store.add_escalation("alpha", "daily_budget", "alpha spent $5.00 today")
        yield api


def test_the_fuzzed_description_is_the_served_one(api: ApiHarness) -> None:
    """The server serves exactly the description the fuzz cases are generated from."""
    assert api.client.get("/openapi.json").json() == openapi_description()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_answers_as_described_and_never_5xx(api: ApiHarness, case: Any) -> None:
    """No generated request gets a 5xx or an answer its description does not allow."""
    case.call_and_validate(base_url=api.url, headers=AUTH, timeout=10)
