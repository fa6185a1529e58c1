"""A daemon frozen past its lease and thawed: the stale worker writes and pushes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LONG, require_engine
from .pause import PAUSE_STATES, pause_trial

BOUNDED = [pytest.param("postgresql", "publishing", marks=pytest.mark.postgres)]
FULL = [
    pytest.param(engine, state, marks=[pytest.mark.postgres] if engine == "postgresql" else [])
    for engine in ("sqlite", "postgresql")
    for state in PAUSE_STATES
]


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "state"), FULL if LONG else BOUNDED)
def test_thawed_daemon_is_fenced(tmp_path: Path, engine: str, state: str) -> None:
    """Another daemon finishes the run; the thawed one neither pushes again nor dies."""
    require_engine(engine)
    figures = pause_trial(tmp_path, engine, state)
    figures.assert_clean()
    assert len(figures.recovery_s) == 1
