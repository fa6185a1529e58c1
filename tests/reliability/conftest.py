"""The reliability campaign's bounded form: every test here carries the ``reliability`` marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .world import postgres_available

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the campaign's tests so CI can select them with ``-m reliability``."""
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


def require_engine(engine: str) -> None:
    """Skip (or fail, under PIPELINE_TEST_REQUIRE_POSTGRES=1) when PostgreSQL is absent."""
    if engine != "postgresql":
        return
    problem = postgres_available()
    if problem is None:
        return
    message = f"PostgreSQL is not reachable: {problem}"
    if os.environ.get("PIPELINE_TEST_REQUIRE_POSTGRES") == "1":
        pytest.fail(message)
    pytest.skip(message)


ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]

# Read at collection, before the autouse fixture clears PIPELINE_* variables.
LONG = "1" in (
    os.environ.get("PIPELINE_RELIABILITY_LONG", ""),
    os.environ.get("PIPELINE_TEST_LONG", ""),
)
