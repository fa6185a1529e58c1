"""Sentinel secrets never leave the daemon; hostile issue text reaches no shell and no ref."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ENGINES, require_engine
from .security import secret_scan


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_no_secret_leaks_and_hostile_text_is_inert(tmp_path: Path, engine: str) -> None:
    """Logs, DB, events, CLI views and frozen evidence hold no sentinel; no marker file."""
    require_engine(engine)
    figures = secret_scan(tmp_path, engine)
    figures.assert_clean()
