"""The fuzz tier: hypothesis campaigns over inputs from outside (webhooks, config files, agent
streams, the HTTP API). Every test here carries the ``fuzz`` marker, so the quick tiers can
leave it out (``pytest -m "not fuzz"``) while ``scripts/test`` still runs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected from this folder as ``fuzz``."""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.fuzz)
