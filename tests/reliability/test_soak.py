"""Replicas on one PostgreSQL under random kill -9: the guarantees hold at every instant."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LONG, require_engine
from .soak import SoakPlan, soak

BOUNDED = SoakPlan(replicas=3, issues=40, repos=8, kills=2)
FULL = SoakPlan(replicas=3, issues=200, repos=20, kills=10, max_concurrency=6, timeout_s=1500)


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
