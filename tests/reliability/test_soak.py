"""Replicas on one database under random kill -9: the guarantees hold at every instant."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LONG, require_engine
from .soak import BOUNDED, FULL, SQLITE_BOUNDED, SQLITE_FULL, soak


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(1800 if LONG else 240)
def test_soak_holds_every_invariant(tmp_path: Path) -> None:
    """Three replicas, random kills: no breach seen by the checker, nothing lost or pushed twice."""
    require_engine("postgresql")
    plan = FULL if LONG else BOUNDED
    figures = soak(tmp_path, plan)
    figures.assert_clean()
    assert figures.faults_injected == plan.kills
    assert figures.throughput_per_min and figures.throughput_per_min > 0


@pytest.mark.slow
@pytest.mark.timeout(1200 if LONG else 180)
def test_soak_on_one_sqlite_file(tmp_path: Path) -> None:
    """Three daemons on one SQLite file, random kills: the same guarantees, checked throughout."""
    plan = SQLITE_FULL if LONG else SQLITE_BOUNDED
    figures = soak(tmp_path, plan)
    figures.assert_clean()
    assert figures.faults_injected == plan.kills
