"""The dashboard in real headless Chromium (Debian's chromium + chromedriver).

Screenshots are kept in ``test-artifacts/`` (dashboard.png, timeline.png).
Without the browser the tests skip, or fail when PIPELINE_TEST_REQUIRE_TOOLS=1
(as in CI). ``scripts/install-browser.sh`` installs it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.settings import SecretRef
from pipeline.store import EnqueueOptions, SeenIssue
from tests.integration.api_harness import OWNER, TOKEN, ApiHarness, running_api

pytestmark = pytest.mark.browser

# Read at import: the autouse fixture clears PIPELINE_* before each test.
REQUIRE_TOOLS = os.environ.get("PIPELINE_TEST_REQUIRE_TOOLS") == "1"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
XSS_TITLE = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    missing = [p for p in (chromium, driver) if not os.access(p, os.X_OK)]
    if missing:
        message = f"browser test needs {', '.join(missing)} (run scripts/install-browser.sh)"
        if REQUIRE_TOOLS:
            pytest.fail(message + "; PIPELINE_TEST_REQUIRE_TOOLS=1 makes this a failure")
        pytest.skip(message)
    return chromium, driver


@contextmanager
def chromium_driver(tmp_path: Path) -> Iterator[object]:
    """Headless Chromium with a fresh profile, driven by the system chromedriver."""
    chromium, driver_path = browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (*CHROMIUM_ARGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(arg)
    service = Service(executable_path=driver_path, log_output=str(tmp_path / "chromedriver.log"))
    browser = webdriver.Chrome(options=options, service=service)
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    with running_api(sqlite_url, tmp_path) as harness:
        issue = harness.store.upsert_issue(
            "alpha",
            SeenIssue(
                tracker="gh",
                number=41,
                title=XSS_TITLE,
                author="mallory",
                url="https://example.invalid/41",
            ),
        )
        harness.store.enqueue("alpha", EnqueueOptions(issue_id=issue.id))
        yield harness


def wait(browser: object, condition: object, timeout_s: float = 15.0) -> object:
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    # Live updates replace table rows while a condition reads them: an element that left
    # the document is read again on the next poll (the wait still fails at its timeout).
    ignored = (StaleElementReferenceException, WebDriverException)
    waiter = WebDriverWait(browser, timeout_s, poll_frequency=0.1, ignored_exceptions=ignored)
    return waiter.until(condition)


def play_a_run(api: ApiHarness) -> None:
    """Claim the queued run and record a realistic timeline through to success."""
    run = api.claim()
    store, owner, attempt = api.store, OWNER, run.attempt
    store.transition(run.id, owner, attempt, "implementing", "agent started (claude)")
    store.append_event_fenced(
        run.id,
        owner,
        attempt,
        "tool",
        "Edit src/greeter/core.py",
        {"tool": "Edit", "path": "src/greeter/core.py"},
    )
    store.append_event_fenced(
        run.id, owner, attempt, "tool", "Bash: python -m unittest", {"tool": "Bash"}
    )
    store.update_run(
        run.id,
        owner,
        attempt,
        cost_usd=0.42,
        tokens_in=5100,
        tokens_out=800,
        num_turns=7,
        pushed_sha="4be1c0ffee1234567890abcdef",
    )
    store.transition(run.id, owner, attempt, "testing")
    store.append_event_fenced(
        run.id,
        owner,
        attempt,
        "test",
        "tests passed",
        {"exit_code": 0, "tail": "...\nRan 12 tests in 0.031s\n\nOK"},
    )
    store.transition(run.id, owner, attempt, "publishing")
    store.append_event_fenced(
        run.id,
        owner,
        attempt,
        "publish",
        "pushed 4be1c0ffee12 to refs/heads/main",
        {"sha": "4be1c0ffee1234567890abcdef", "ref": "refs/heads/main"},
    )
    store.transition(run.id, owner, attempt, "watching")
    store.append_event_fenced(
        run.id,
        owner,
        attempt,
        "ci",
        "CI passed for 4be1c0ffee12",
        {"state": "success", "checks": 3},
    )
    store.append_event_fenced(
        run.id,
        owner,
        attempt,
        "deploy",
        "deploy healthy: 3/3 probes",
        {"url": "http://127.0.0.1:8080/version", "status": 200},
    )
    store.finish(run.id, owner, attempt, "succeeded", summary="Greeting now says hello twice.")


def test_new_run_appears_live_and_its_timeline_opens(driver: object, api: ApiHarness) -> None:
    """The runs page loads, a run enqueued after load appears live, clicking opens its timeline."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec

    assert isinstance(driver, WebDriver)
    driver.get(api.url + "/")
    wait(driver, ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    issue_cell = driver.find_element(By.CSS_SELECTOR, "#run-1 td.issue")
    assert XSS_TITLE in issue_cell.text  # shown as text, not run
    assert driver.execute_script("return window.__xss") is None

    run = api.store.enqueue("beta", EnqueueOptions(priority=3)).run
    row = wait(driver, ec.presence_of_element_located((By.ID, f"run-{run.id}")))
    assert "beta" in row.text and "queued" in row.text  # type: ignore[attr-defined]
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "dashboard.png"))

    row.find_element(By.CSS_SELECTOR, "a.run-link").click()  # type: ignore[attr-defined]
    wait(driver, ec.url_to_be(f"{api.url}/runs/{run.id}"))
    wait(driver, ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    assert f"Run #{run.id}" in driver.find_element(By.TAG_NAME, "h1").text
    play_a_run(api)
    wait(driver, ec.text_to_be_present_in_element((By.CSS_SELECTOR, "h1 .badge"), "succeeded"))
    timeline = driver.find_element(By.ID, "timeline").text
    assert "test gate" in timeline and "Ran 12 tests" not in timeline  # phases folded
    driver.find_element(By.CSS_SELECTOR, "details.phase-test-gate > summary").click()
    timeline = driver.find_element(By.ID, "timeline").text
    assert "tests passed" in timeline and "Ran 12 tests" not in timeline  # raw output folded
    driver.find_element(By.CSS_SELECTOR, "details.phase-test-gate details.raw > summary").click()
    timeline = driver.find_element(By.ID, "timeline").text
    assert "Ran 12 tests" in timeline
    assert "to main" in driver.find_element(By.CSS_SELECTOR, "dd.pushed").text
    assert "$0.42" in driver.find_element(By.CSS_SELECTOR, "dl.facts").text
    driver.find_element(By.CSS_SELECTOR, "details.phase-watch > summary").click()
    assert "deploy healthy" in driver.find_element(By.ID, "timeline").text
    driver.set_window_size(1280, 1400)
    driver.save_screenshot(str(ARTIFACTS / "timeline.png"))


def test_sign_in_once_then_act_without_a_token(
    driver: object, sqlite_url: str, tmp_path: Path
) -> None:
    """With a read token: pages need sign-in; signed in once, unfreeze/freeze/retry just work."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec

    assert isinstance(driver, WebDriver)
    read_file = tmp_path / "read-token"
    read_file.write_text("read-only-token-1\n", encoding="utf-8")
    with running_api(sqlite_url, tmp_path) as api:
        http = replace(api.settings.http, read_token=SecretRef(file=read_file))
        api.handle.app.state.ctx.settings = replace(api.settings, http=http)
        api.store.freeze_repo("beta", "deploy broken after fix-forward", "recovery")
        failed = api.store.enqueue("alpha").run
        api.finish(api.claim(), "failed")

        driver.get(api.url + "/repos")
        assert "Sign in" in driver.find_element(By.TAG_NAME, "h1").text
        assert "fix-forward" not in driver.page_source  # nothing readable without a session
        sign_in(driver, "wrong")
        wait(driver, ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".notice"), "not the"))
        sign_in(driver, TOKEN)
        wait(driver, ec.url_to_be(f"{api.url}/repos"))
        row = driver.find_element(By.CSS_SELECTOR, 'tr[data-repo="beta"]')
        assert "deploy broken after fix-forward" in row.text
        assert not driver.find_elements(By.NAME, "token")  # no token field anywhere
        row.find_element(By.NAME, "note").send_keys("checked by hand")
        row.find_element(By.CSS_SELECTOR, "button").click()
        badge = (By.CSS_SELECTOR, 'tr[data-repo="beta"] .badge')
        wait(driver, ec.text_to_be_present_in_element(badge, "active"))
        repo = api.store.get_repo("beta")
        assert repo is not None and not repo.frozen
        click_when_ready(driver, 'tr[data-repo="alpha"] button')
        wait(
            driver,
            ec.text_to_be_present_in_element(
                (By.CSS_SELECTOR, 'tr[data-repo="alpha"] .badge'), "frozen"
            ),
        )
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "repos-signed-in.png"))

        driver.get(f"{api.url}/runs/{failed.id}")
        driver.find_element(By.CSS_SELECTOR, "section.actions button").click()
        wait(driver, ec.url_matches(rf"/runs/(?!{failed.id}$)[0-9]+$"))
        assert api.store.count_runs() == 2
        driver.save_screenshot(str(ARTIFACTS / "retried-run.png"))


def click_when_ready(driver: object, css: str) -> None:
    """Click an element, trying again while a live reload replaces the page under it."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(driver, WebDriver)

    def click(browser: WebDriver) -> bool:
        try:
            browser.find_element(By.CSS_SELECTOR, css).click()
        except (StaleElementReferenceException, WebDriverException):
            return False
        return True

    WebDriverWait(driver, 15, poll_frequency=0.2).until(click)


def sign_in(driver: object, token: str) -> None:
    """Fill the sign-in form shown on the current page and submit it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(driver, WebDriver)
    field = driver.find_element(By.CSS_SELECTOR, 'form.signin input[name="token"]')
    field.clear()
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.signin button").click()


PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}


def test_every_page_fits_a_phone(driver: object, api: ApiHarness) -> None:
    """At 390 px no page is wider than the screen (desktop widths shown for comparison)."""
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(driver, WebDriver)
    play_a_run(api)
    api.store.freeze_repo("beta", "deploy broken after fix-forward " * 4, "recovery")
    api.store.enqueue("beta", EnqueueOptions(priority=2))
    pages = {"runs": "/", "run": "/runs/1", "repos": "/repos", "login": "/login"}
    ARTIFACTS.mkdir(exist_ok=True)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    for name, path in pages.items():
        driver.get(api.url + path)
        wide = driver.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth]"
        )
        driver.save_screenshot(str(ARTIFACTS / f"phone-{name}.png"))
        assert wide[0] <= wide[1], f"{path} is {wide[0]} px wide on a {wide[1]} px screen"
    driver.get(api.url + "/repos")
    button = driver.find_element("css selector", 'tr[data-repo="beta"] a')
    inside = driver.execute_script(
        "var r = arguments[0].getBoundingClientRect(); return r.right <= window.innerWidth;",
        button,
    )
    assert inside  # the unfreeze control is on screen


def test_a_long_agent_run_reads_as_phases(driver: object, api: ApiHarness) -> None:
    """Hundreds of agent events fold into a few phases; the implement phase holds them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(driver, WebDriver)
    run = api.claim()
    store, attempt = api.store, run.attempt
    store.transition(run.id, OWNER, attempt, "implementing", "agent started (claude)")
    for turn in range(150):
        store.append_event_fenced(run.id, OWNER, attempt, "agent", f"turn {turn}: reading the code")
        store.append_event_fenced(
            run.id, OWNER, attempt, "tool", f"Read src/mod_{turn}.py", {"tool": "Read"}
        )
    store.transition(run.id, OWNER, attempt, "testing")
    store.append_event_fenced(
        run.id, OWNER, attempt, "test", "tests failed", {"tail": "line one\nline two"}
    )
    store.finish(run.id, OWNER, attempt, "failed", error="tests failed:\nline one\nline two")
    driver.get(f"{api.url}/runs/{run.id}")
    phases = driver.find_elements(By.CSS_SELECTOR, "#timeline > details.phase")
    names = [p.find_element(By.CSS_SELECTOR, ".phase-name").text for p in phases]
    assert names == ["queue", "implement", "test gate", "outcome"]
    implement = phases[1]
    assert implement.get_attribute("open") is None  # folded: nothing went wrong there
    assert len(implement.find_elements(By.CSS_SELECTOR, "li.ev")) == 301
    assert phases[2].get_attribute("open") is not None  # the failing gate is open
    error = driver.find_element(By.CSS_SELECTOR, "dd.error")
    assert "line one\nline two" in error.text  # line breaks kept
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "run-phases.png"))
