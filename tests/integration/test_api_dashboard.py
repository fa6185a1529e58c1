"""The dashboard's server-rendered pages over HTTP: content, escaping, filters, fragments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.run.recovery import FIX_FORWARD_PRIORITY
from pipeline.store import EnqueueOptions, SeenIssue
from tests.integration.api_harness import ApiHarness, running_api

EVIL = "<script>alert('x')</script>"


@pytest.fixture
def api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    with running_api(sqlite_url, tmp_path) as harness:
        issue = harness.store.upsert_issue(
            "alpha",
            SeenIssue(tracker="gh", number=7, title=EVIL, author="x", url="javascript:alert(1)"),
        )
        harness.store.enqueue("alpha", EnqueueOptions(issue_id=issue.id))
        harness.store.enqueue(
            "beta", EnqueueOptions(kind="fix_forward", priority=FIX_FORWARD_PRIORITY)
        )
        yield harness


def test_runs_page_lists_runs_with_csp(api: ApiHarness) -> None:
    """GET / lists the runs, with filters and a Content-Security-Policy without inline script."""
    resp = api.client.get("/")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in resp.headers["content-security-policy"]
    assert 'id="run-1"' in resp.text and 'id="run-2"' in resp.text
    assert '<option value="fix_forward">' in resp.text
    assert "<b>2</b> queued" in resp.text


def test_issue_titles_are_escaped(api: ApiHarness) -> None:
    """A <script> issue title is rendered as text on the list and the run page."""
    for path in ("/", "/runs/1", "/fragments/runs", "/fragments/runs/1"):
        text = api.client.get(path).text
        assert EVIL not in text, path
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in text, path


def test_filters_narrow_the_table(api: ApiHarness) -> None:
    """The repo, state and kind filters narrow the rows, fragments included."""
    beta = api.client.get("/", params={"repo": "beta"}).text
    assert 'id="run-2"' in beta and 'id="run-1"' not in beta
    assert 'data-fragment="/fragments/runs?repo=beta"' in beta
    fixes = api.client.get("/fragments/runs", params={"kind": "fix_forward"}).text
    assert 'id="run-2"' in fixes and 'id="run-1"' not in fixes
    blank = api.client.get("/", params={"repo": "", "state": "", "kind": ""})
    assert blank.status_code == 200 and 'id="run-1"' in blank.text  # "all" in the form
    none = api.client.get("/", params={"state": "failed"}).text
    assert "No runs yet for these filters" in none


def test_bad_filter_is_a_page_not_a_crash(api: ApiHarness) -> None:
    """An invalid filter value answers 422 with a page naming the parameter."""
    resp = api.client.get("/", params={"state": "bogus"})
    assert resp.status_code == 422 and "state: must be one of" in resp.text


def test_run_page_shows_timeline_and_cost(api: ApiHarness) -> None:
    """GET /runs/{id} shows facts, cost and the timeline by phase, output tails behind a toggle."""
    run = api.claim()
    api.finish(run, cost_usd=1.5, tokens_in=10, tokens_out=20)
    text = api.client.get(f"/runs/{run.id}").text
    assert f"Run #{run.id}" in text and "$1.50" in text
    assert "tests passed" in text
    assert '<summary>tail (1 line)</summary><pre class="tail">3 passed in 0.1s</pre>' in text
    assert 'class="phase-name">implement<' in text
    assert f'href="/api/runs/{run.id}/log"' in text


def test_only_web_links_are_linked(api: ApiHarness) -> None:
    """An issue URL that is not http(s) (javascript:...) is never rendered as a link."""
    text = api.client.get("/runs/1").text
    assert "javascript:" not in text and "#7" in text


def test_missing_pages_are_404_pages(api: ApiHarness) -> None:
    """Unknown runs and paths give a 404 HTML page; API paths give JSON."""
    run = api.client.get("/runs/999")
    assert run.status_code == 404 and "Run 999 does not exist" in run.text
    page = api.client.get("/nowhere")
    assert page.status_code == 404 and "text/html" in page.headers["content-type"]
    api_path = api.client.get("/api/nowhere")
    assert api_path.status_code == 404 and "error" in api_path.json()


def test_repos_page_shows_frozen_state_and_actions(api: ApiHarness) -> None:
    """GET /repos shows the frozen reason; signed in, an unfreeze form posting to the API."""
    api.store.freeze_repo("beta", "deploy broken <b>twice</b>", "recovery")
    text = api.client.get("/repos").text
    assert "deploy broken &lt;b&gt;twice&lt;/b&gt;" in text
    assert "sign in to unfreeze" in text and "data-url" not in text
    api.sign_in()
    text = api.client.get("/repos").text
    assert 'data-url="/api/repos/beta/unfreeze"' in text
    assert 'data-url="/api/repos/alpha/freeze"' in text


def test_static_assets_are_served(api: ApiHarness) -> None:
    """The stylesheet and the live-update script are served from /static."""
    css = api.client.get("/static/style.css")
    js = api.client.get("/static/live.js")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    assert js.status_code == 200 and "EventSource" in js.text


def test_a_run_with_an_undelivered_notification_says_so(api: ApiHarness) -> None:
    """A pending notification marks the run page and the run's JSON until it is delivered."""
    from pipeline.store import Attempt, Channel, NotificationDraft

    assert "undelivered" not in api.client.get("/runs/1").text
    (row,) = api.store.add_notification(
        NotificationDraft("escalation", "t", "b", run_id=1), [Channel("json://127.0.0.1", "k")]
    )
    assert 'class="badge undelivered"' in api.client.get("/runs/1").text
    assert api.client.get("/api/runs/1").json()["notifications_undelivered"] == 1
    api.store.record_attempt(Attempt(row, ok=True))
    assert "undelivered" not in api.client.get("/runs/1").text
    assert api.client.get("/api/runs/1").json()["notifications_undelivered"] == 0


def test_waiting_issues_are_shown_with_why(api: ApiHarness) -> None:
    """An issue held back by a dependency is listed as waiting, with its reason, escaped."""
    issue = api.store.upsert_issue(
        "alpha", SeenIssue(tracker="gh", number=9, title=EVIL, author="x", url="https://x/9")
    )
    api.store.set_waiting(issue.id, "waits for #8 (open)")
    for path in ("/", "/fragments/runs", "/?repo=alpha"):
        text = api.client.get(path).text
        assert "Waiting for dependencies" in text and "waits for #8 (open)" in text, path
        assert '<a href="https://x/9" rel="noreferrer">#9</a>' in text and EVIL not in text
    assert "waits for #8" not in api.client.get("/", params={"repo": "beta"}).text
    api.store.set_waiting(issue.id, None)
    assert "Waiting for dependencies" not in api.client.get("/").text


def test_bad_filter_page_says_the_filter_is_wrong_not_missing(api: ApiHarness) -> None:
    """A bad filter's page is titled as a bad filter, with the filters' page a click away."""
    text = api.client.get("/", params={"since": "yesterday"}).text
    assert "<h1>Bad filter</h1>" in text and "Not found" not in text
    assert "since: expected an ISO time" in text


def test_a_page_past_the_last_run_says_so_and_links_back(api: ApiHarness) -> None:
    """An offset past the runs (they moved on, an old link) names the count, not 'no runs yet'."""
    for n in range(3, 6):
        api.store.enqueue("alpha", EnqueueOptions(priority=n))
    page = api.client.get("/", params={"state": "queued", "limit": 2, "offset": 8}).text
    assert "No runs yet" not in page
    assert "No runs on this page" in page
    assert "9\u20135 of 5" not in page and "none of 5" in page
    assert 'href="/?state=queued&amp;limit=2&amp;offset=4"' in page  # the last page, not 6
    second = api.client.get("/", params={"limit": 2, "offset": 2}).text
    assert "3\u20134 of 5" in second  # and its live refresh keeps the page size:
    assert 'data-fragment="/fragments/runs?limit=2&amp;offset=2"' in second
