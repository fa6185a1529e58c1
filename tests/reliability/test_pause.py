"""A daemon frozen past its lease and thawed: the stale worker is fenced and pushes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.errors import LeaseLost
from pipeline.store import Store

from .conftest import ENGINES, LONG, require_engine
from .pause import PAUSE_STATES, pause_trial

BOUNDED = [
    pytest.param(
        engine, "publishing", marks=[pytest.mark.postgres] if engine == "postgresql" else []
    )
    for engine in ("sqlite", "postgresql")
]
FULL = [
    pytest.param(engine, state, marks=[pytest.mark.postgres] if engine == "postgresql" else [])
    for engine in ("sqlite", "postgresql")
    for state in PAUSE_STATES
]


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "state"), FULL if LONG else BOUNDED)
def test_thawed_daemon_is_fenced(tmp_path: Path, engine: str, state: str) -> None:
    """Another daemon finishes the run; the thawed one's write is rejected and nothing follows."""
    require_engine(engine)
    figures = pause_trial(tmp_path, engine, state)
    figures.assert_clean()
    assert len(figures.recovery_s) == 1


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_pause_scenario_fails_when_the_fence_is_removed(tmp_path: Path, engine: str) -> None:
    """With the lease fence sabotaged in the frozen daemon, the scenario reports the breach."""
    require_engine(engine)
    figures = pause_trial(tmp_path, engine, "publishing", {"PIPELINE_FAULTS": "remove_fence"})
    assert any("after the run was claimed again" in v for v in figures.invariant_violations), (
        figures.problems
    )


def test_the_sabotage_lifts_the_fence_of_the_last_write_too(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker frozen at the very end of its run has one write left, its finish. The
    sabotage must lift that write's fence too (on PostgreSQL it is a statement of its own),
    or the scenario above sees no breach when the freeze lands there."""
    store.ensure_repo("alpha")
    store.enqueue("alpha")
    run = store.claim_next("stale", max_concurrency=1, lease_s=60.0)
    assert run is not None
    with pytest.raises(LeaseLost):
        store.finish(run.id, "someone else", run.attempt, "succeeded")
    monkeypatch.setenv("PIPELINE_FAULTS", "remove_fence")
    assert store.finish(run.id, "someone else", run.attempt, "succeeded").state == "succeeded"
