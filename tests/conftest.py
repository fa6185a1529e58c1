"""Shared fixtures: a clean environment, databases on SQLite and PostgreSQL, a store on each."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.core.masking import clear_secrets
from pipeline.store import Store
from pipeline.testing.databases import fresh_postgres, open_store, postgres_problem
from pipeline.testing.databases import postgres_url as _server_url

# Variables a developer's shell might carry that would change what tests see.
_LEAKY_PREFIXES = ("PIPELINE_", "ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_", "GIT_")
_LEAKY_NAMES = ("GITHUB_TOKEN", "GH_TOKEN", "GITEA_TOKEN", "GITLAB_TOKEN", "XDG_DATA_HOME")
# Kept: these steer the test run itself, not the code under test.
_KEEP = ("PIPELINE_TEST_REQUIRE_POSTGRES", "PIPELINE_TEST_POSTGRES_URL", "PIPELINE_TEST_LONG")

POSTGRES_URL = _server_url()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Clear every variable that could leak a developer's setup into a test."""
    for name in list(os.environ):
        if name in _KEEP:
            continue
        if name.startswith(_LEAKY_PREFIXES) or name in _LEAKY_NAMES:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "afk test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "afk@test.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "afk test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "afk@test.invalid")


@pytest.fixture(autouse=True)
def clean_secrets() -> Iterator[None]:
    """Forget registered secrets around each test, so one test's secrets never mask another's."""
    clear_secrets()
    yield
    clear_secrets()


# Places every sandbox replaces with a fresh tmpfs: a sentinel there is out of sight anyway.
_FRESH_IN_SANDBOX = tuple(Path(p) for p in ("/tmp", "/var/tmp", "/run", "/var/run"))


@pytest.fixture
def host_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on the host's disk that a sandbox would show, removed afterwards.

    A test that checks the sandbox hides something keeps it here, not under ``tmp_path``
    (``/tmp``, which every sandbox replaces): there it would be out of sight whether or
    not the daemon hides it, and the test could not fail. HOME moves to ``tmp_path``
    for the same reason: the daemon hides its HOME, which may hold this checkout."""
    path = Path(tempfile.mkdtemp(prefix=".afk-host-", dir=Path(__file__).parent)).resolve()
    try:
        fresh = [p for p in _FRESH_IN_SANDBOX if p.resolve() in (path, *path.parents)]
        assert not fresh, f"{path} is under {fresh[0]}, which every sandbox replaces"
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _require_postgres() -> None:
    problem = postgres_problem(POSTGRES_URL)
    if problem is None:
        return
    message = f"PostgreSQL at {POSTGRES_URL} is not reachable: {problem}"
    if os.environ.get("PIPELINE_TEST_REQUIRE_POSTGRES") == "1":
        pytest.fail(message + " (PIPELINE_TEST_REQUIRE_POSTGRES=1 makes this a failure)")
    pytest.skip(message)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, dropped afterwards."""
    _require_postgres()
    with fresh_postgres("afk_test", POSTGRES_URL) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite database file."""
    return f"sqlite:///{tmp_path / 'history.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each engine: every store test runs on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    """A store on each engine, schema current, no repos; a module enrolls its own by overriding
    this fixture (``def store(store): store.ensure_repo("alpha"); return store``)."""
    with open_store(database_url) as opened:
        yield opened


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many PostgreSQL tests ran, so a CI log shows they were not skipped."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "postgres" in getattr(report, "keywords", {}) and report.when in ("call", "setup"):
                if outcome == "passed" and report.when != "call":
                    continue
                counts[outcome] = counts.get(outcome, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none collected"
    terminalreporter.write_line(f"PostgreSQL tests: {summary}")
