"""Live refresh in real headless Chromium: no change is lost while a refresh is in flight.

The page's script is watched from inside the browser (a script installed before the page's
own): every live event it is handed is recorded, and the page's fragment requests can be
held back, so the test decides the order of "the refresh was answered" and "the run ended".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.store import EnqueueOptions
from tests.e2e.test_dashboard_browser import wait
from tests.integration.api_harness import OWNER, ApiHarness, running_api

pytestmark = pytest.mark.browser

# Installed before the page's scripts: records the live events the page listens to, and
# holds each fragment response until ``window.__release()`` (the request itself goes out
# at once, so its answer is the page as it was then).
WATCH = """
window.__events = [];
window.__fragments = 0;
var held = [];
window.__hold = false;
window.__release = function () {
  window.__hold = false;
  held.splice(0).forEach(function (go) { go(); });
};
var listen = EventSource.prototype.addEventListener;
EventSource.prototype.addEventListener = function (name, handler) {
  return listen.call(this, name, function (msg) { window.__events.push(name); handler(msg); });
};
var fetchNow = window.fetch;
window.fetch = function (url, options) {
  var answer = fetchNow(url, options);
  if (String(url).indexOf("/fragments/") < 0) return answer;
  window.__fragments += 1;
  if (!window.__hold) return answer;
  return new Promise(function (resolve) { held.push(function () { resolve(answer); }); });
};
"""


@pytest.fixture
def api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    """One alpha run, claimed and implementing."""
    with running_api(sqlite_url, tmp_path) as harness:
        harness.store.enqueue("alpha", EnqueueOptions())
        run = harness.claim()
        harness.store.transition(run.id, OWNER, run.attempt, "implementing")
        yield harness


def test_a_run_ending_during_a_refresh_is_shown(driver: object, api: ApiHarness) -> None:
    """The run ends while the page fetches its last change: the page still ends up showing it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec

    assert isinstance(driver, WebDriver)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    run = api.store.get_run(1)
    assert run is not None
    driver.get(f"{api.url}/runs/{run.id}")
    wait(driver, ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    driver.execute_script("window.__hold = true;")
    api.store.append_event_fenced(run.id, OWNER, run.attempt, "tool", "Edit README.md", {})
    wait(driver, lambda d: d.execute_script("return window.__fragments") == 1)
    api.store.finish(run.id, OWNER, run.attempt, "succeeded")
    wait(driver, lambda d: "run.succeeded" in d.execute_script("return window.__events"))
    driver.execute_script("window.__release();")
    badge = (By.CSS_SELECTOR, "h1 .badge")
    wait(driver, ec.text_to_be_present_in_element(badge, "succeeded"))


def test_a_run_page_offers_the_actions_of_the_state_it_shows(
    driver: object, api: ApiHarness
) -> None:
    """Signed in, a run that fails while its page is open stops offering cancel and offers retry."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec

    from tests.e2e.test_dashboard_browser import sign_in
    from tests.integration.api_harness import TOKEN

    assert isinstance(driver, WebDriver)
    run = api.store.get_run(1)
    assert run is not None
    driver.get(f"{api.url}/login?next=/runs/{run.id}")
    sign_in(driver, TOKEN)
    wait(driver, ec.url_to_be(f"{api.url}/runs/{run.id}"))
    wait(driver, ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    actions = (By.CSS_SELECTOR, "section.actions")
    assert "Cancel run" in driver.find_element(*actions).text
    api.store.finish(run.id, OWNER, run.attempt, "failed", error="tests never went green")
    wait(driver, ec.text_to_be_present_in_element(actions, "Retry as a new run"))
    assert "Cancel run" not in driver.find_element(*actions).text
    driver.find_element(By.CSS_SELECTOR, "section.actions button").click()
    wait(driver, ec.url_matches(rf"/runs/(?!{run.id}$)[0-9]+$"))
    assert api.store.count_runs() == 2
