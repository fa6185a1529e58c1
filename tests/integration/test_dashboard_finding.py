"""The runs page's finding controls (time/text filters, saved views, run picking) and the
repos page's spend against the daily budget, rendered by a real server over a real store."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from pipeline.config.settings import RepoSettings
from pipeline.http.budgets import budget_line
from pipeline.store import EnqueueOptions, SeenIssue
from pipeline.store.models import RunRow
from tests.integration.api_harness import OWNER, ApiHarness, running_api


def budgeted(name: str, daily_usd: float | None) -> RepoSettings:
    return RepoSettings(
        name=name, tracker="gh", slug=f"org/{name}", remote_url="x", daily_budget_usd=daily_usd
    )


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    """alpha has a $5 daily budget, beta $1, gamma none; run 1 (alpha, 'Login bug') failed."""
    repos = (budgeted("alpha", 5.0), budgeted("beta", 1.0), budgeted("gamma", None))
    with running_api(database_url, tmp_path, repos=repos) as harness:
        harness.store.ensure_repo("gamma", tracker="gh", slug="org/gamma")
        seen = SeenIssue(tracker="gh", number=5, title="Login bug", author="a", url="u")
        issue = harness.store.upsert_issue("alpha", seen)
        harness.store.enqueue("alpha", EnqueueOptions(issue_id=issue.id))
        harness.finish(harness.claim(), "failed", cost_usd=1.2)
        harness.store.enqueue("beta")
        yield harness


def test_time_and_text_filters_narrow_the_page_and_stay_as_written(api: ApiHarness) -> None:
    """since/text filter the rows; the live fragment and pager keep ``24h`` as written."""
    page = api.client.get("/", params={"since": "24h", "text": "login"}).text
    assert 'id="run-1"' in page and 'id="run-2"' not in page
    assert 'data-fragment="/fragments/runs?since=24h&amp;text=login"' in page
    assert 'name="since" value="24h"' in page and 'name="text" value="login"' in page
    fragment = api.client.get("/fragments/runs", params={"text": "BETA"}).text
    assert 'id="run-2"' in fragment and 'id="run-1"' not in fragment
    assert 'id="run-1"' not in api.client.get("/", params={"until": "1d"}).text


def test_a_bad_time_filter_is_a_page_naming_it(api: ApiHarness) -> None:
    """since=yesterday answers 422 with a page naming the parameter and the valid forms."""
    page = api.client.get("/", params={"since": "yesterday"})
    assert page.status_code == 422
    assert "since: expected" in page.text and "24h" in page.text


def test_saved_views_are_plain_links_marked_when_current(api: ApiHarness) -> None:
    """The runs page links 'Failed today', 'Escalated' and 'Frozen repos'; each URL works."""
    page = api.client.get("/").text
    views = dict(re.findall(r'<a href="(/\?[^"]+)"[^>]*>([^<]+)</a>', page))
    assert views["/?state=failed&amp;since=today"] == "Failed today"
    assert views["/?state=escalated"] == "Escalated"
    assert views["/?repo_state=frozen"] == "Frozen repos"
    failed = api.client.get("/?state=failed&since=today").text
    assert 'id="run-1"' in failed and 'id="run-2"' not in failed
    assert 'aria-current="page">Failed today' in failed
    api.store.freeze_repo("beta", "broken", "test")
    frozen = api.client.get("/?repo_state=frozen").text
    assert 'id="run-2"' in frozen and 'id="run-1"' not in frozen


def test_runs_can_be_picked_only_when_signed_in_to_write(api: ApiHarness) -> None:
    """Checkboxes and the batch bar appear for a write session, page and fragment alike."""
    page = api.client.get("/").text
    assert 'class="pick"' not in page and 'id="batch"' not in page
    assert "to retry or cancel several runs" in page
    api.sign_in()
    page = api.client.get("/").text
    assert 'id="batch" data-url="/api/runs/batch"' in page
    assert 'value="1" aria-label="select run 1"' in page
    assert 'aria-label="select run 2"' in api.client.get("/fragments/runs").text


def test_repos_page_shows_spend_today_against_the_daily_budget(api: ApiHarness) -> None:
    """alpha '$1.20 of $5.00'; beta over its $1 budget and marked; gamma 'no budget'."""
    owner_run = api.claim()
    api.store.update_run(owner_run.id, OWNER, owner_run.attempt, cost_usd=1.0)
    page = api.client.get("/repos").text
    rows = {
        name: " ".join(re.sub(r"<[^>]+>", " ", cell).split())
        for name, cell in re.findall(
            r'data-repo="(\w+)">.*?<td data-label="Today"[^>]*>(.*?)</td>', page, re.S
        )
    }
    assert rows["alpha"] == "$1.20 of $5.00"
    assert rows["beta"] == "$1.00 of $1.00 over budget"
    assert rows["gamma"] == "$0.00 today, no budget"


def test_spend_before_today_does_not_count(api: ApiHarness) -> None:
    """A run last updated before midnight UTC is not part of today's spend."""
    yesterday = api.store.now().replace(hour=0, minute=0, second=0) - timedelta(hours=1)
    with api.store.engine.begin() as conn:
        conn.execute(update(RunRow).where(RunRow.id == 1).values(updated_at=yesterday))
    assert "$0.00 of $5.00" in api.client.get("/repos").text


@pytest.mark.parametrize(
    ("spent", "budget", "status", "text"),
    [
        (0.0, None, "none", "$0.00 today, no budget"),
        (3.99, 5.0, "ok", "$3.99 of $5.00"),
        (4.0, 5.0, "near", "$4.00 of $5.00"),
        (5.0, 5.0, "over", "$5.00 of $5.00"),
        (7.5, 5.0, "over", "$7.50 of $5.00"),
    ],
)
def test_budget_line_marks_near_and_over(
    spent: float, budget: float | None, status: str, text: str
) -> None:
    """From 80 % a repo is near its budget; at 100 % (where new runs stop) it is over."""
    line = budget_line(spent, budget)
    assert (line.status, line.text) == (status, text)
