"""Finding and acting in real headless Chromium: a saved view, a batch retry, the budget column.

Screenshots are kept in ``test-artifacts/`` (batch-retried.png, phone-*-signed-in.png).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings
from pipeline.store import EnqueueOptions, SeenIssue
from tests.e2e.test_dashboard_browser import (
    ARTIFACTS,
    PHONE,
    click_when_ready,
    sign_in,
    wait,
)
from tests.integration.api_harness import TOKEN, ApiHarness, running_api

pytestmark = pytest.mark.browser


def budgeted(name: str, daily_usd: float) -> RepoSettings:
    return RepoSettings(
        name=name, tracker="gh", slug=f"org/{name}", remote_url="x", daily_budget_usd=daily_usd
    )


def issue_run(api: ApiHarness, repo: str, number: int, title: str) -> int:
    seen = SeenIssue(tracker="gh", number=number, title=title, author="a", url="u")
    issue = api.store.upsert_issue(repo, seen)
    return api.store.enqueue(repo, EnqueueOptions(issue_id=issue.id)).run.id


@pytest.fixture
def api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    """Runs: 1 alpha failed ($1.20), 2 beta failed ($1.00), 3 beta succeeded, 4 alpha running.
    alpha's daily budget is $5, beta's $1."""
    repos = (budgeted("alpha", 5.0), budgeted("beta", 1.0))
    with running_api(sqlite_url, tmp_path, repos=repos) as harness:
        issue_run(harness, "alpha", 1, "Login page crashes")
        harness.finish(harness.claim(), "failed", cost_usd=1.2)
        issue_run(harness, "beta", 2, "Dark mode flickers")
        harness.finish(harness.claim(), "failed", cost_usd=1.0)
        issue_run(harness, "beta", 3, "Typo in footer")
        harness.finish(harness.claim(), "succeeded")
        issue_run(harness, "alpha", 4, "Slow search")
        harness.claim()
        yield harness


def signed_in(driver: object, api: ApiHarness) -> None:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec

    assert isinstance(driver, WebDriver)
    driver.get(api.url + "/login?next=/")
    sign_in(driver, TOKEN)
    wait(driver, ec.url_to_be(f"{api.url}/"))


def shown_run_ids(driver: object) -> list[int]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(driver, WebDriver)
    rows = driver.find_elements(By.CSS_SELECTOR, "#runs-body tr.run")
    return [int(row.get_attribute("data-run-id") or 0) for row in rows]


def test_saved_view_then_batch_retry_then_budget(driver: object, api: ApiHarness) -> None:
    """Signed in: 'Failed today' shows the failed runs, two are retried at once, the repos
    page shows each repo's spend today against its budget."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec

    assert isinstance(driver, WebDriver)
    signed_in(driver, api)
    assert shown_run_ids(driver) == [4, 3, 2, 1]
    driver.find_element(By.LINK_TEXT, "Failed today").click()
    wait(driver, ec.url_to_be(f"{api.url}/?state=failed&since=today"))
    assert shown_run_ids(driver) == [2, 1]
    retry = driver.find_element(By.CSS_SELECTOR, '#batch button[data-action="retry"]')
    assert not retry.is_enabled()  # nothing picked yet
    click_when_ready(driver, "#run-1 input.pick")
    click_when_ready(driver, "#run-2 input.pick")
    wait(driver, ec.text_to_be_present_in_element((By.ID, "batch-count"), "2"))
    retry.click()
    wait(driver, ec.text_to_be_present_in_element((By.ID, "batch-status"), "2 done, 0 refused"))
    results = driver.find_elements(By.CSS_SELECTOR, "#batch-results li.done")
    assert sorted(int(li.get_attribute("data-run-id") or 0) for li in results) == [1, 2]
    assert all("queued again as run" in li.text for li in results)
    new_runs = [r for r in api.store.list_runs() if r.id > 4]
    assert sorted(r.issue_number or 0 for r in new_runs) == [1, 2]
    assert all(r.state == "queued" and r.requested_by == "api" for r in new_runs)
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "batch-retried.png"))

    driver.get(api.url + "/repos")
    alpha = driver.find_element(By.CSS_SELECTOR, 'tr[data-repo="alpha"] td[data-label="Today"]')
    beta = driver.find_element(By.CSS_SELECTOR, 'tr[data-repo="beta"] td[data-label="Today"]')
    assert alpha.text == "$1.20 of $5.00"
    assert beta.text == "$1.00 of $1.00 over budget"
    assert "budget-over" in (beta.get_attribute("class") or "")


def test_a_failed_retry_in_a_batch_is_reported(driver: object, api: ApiHarness) -> None:
    """Picking a running run with a failed one: the running one is refused, with why."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec

    assert isinstance(driver, WebDriver)
    signed_in(driver, api)
    click_when_ready(driver, "#run-4 input.pick")
    click_when_ready(driver, "#run-1 input.pick")
    wait(driver, ec.text_to_be_present_in_element((By.ID, "batch-count"), "2"))
    driver.find_element(By.CSS_SELECTOR, '#batch button[data-action="retry"]').click()
    wait(driver, ec.text_to_be_present_in_element((By.ID, "batch-status"), "1 done, 1 refused"))
    refused = driver.find_element(By.CSS_SELECTOR, "#batch-results li.refused")
    assert refused.get_attribute("data-run-id") == "4"
    assert "run 4 is preparing" in refused.text


def test_the_new_controls_fit_a_phone(driver: object, api: ApiHarness) -> None:
    """Signed in at 390 px: filters, saved views, checkboxes, batch bar and budgets fit."""
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(driver, WebDriver)
    signed_in(driver, api)
    api.store.freeze_repo("beta", "deploy broken after fix-forward " * 4, "recovery")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    pages = {
        "runs": "/?since=7d&text=a%20rather%20long%20search%20text",
        "failed-today": "/?state=failed&since=today",
        "frozen": "/?repo_state=frozen",
        "repos": "/repos",
    }
    ARTIFACTS.mkdir(exist_ok=True)
    for name, path in pages.items():
        driver.get(api.url + path)
        wide = driver.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth]"
        )
        driver.save_screenshot(str(ARTIFACTS / f"phone-{name}-signed-in.png"))
        assert wide[0] <= wide[1], f"{path} is {wide[0]} px wide on a {wide[1]} px screen"
    driver.get(api.url + "/?state=failed")
    outside = driver.execute_script(
        "var w = window.innerWidth; return Array.prototype.filter.call("
        "document.querySelectorAll('td.pick label, #batch button, .views a, .filters input'),"
        "function (el) { var r = el.getBoundingClientRect(); return r.left < 0 || r.right > w; })"
        ".length;"
    )
    assert outside == 0  # every new control is on screen
