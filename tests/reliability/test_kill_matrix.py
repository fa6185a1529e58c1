"""kill -9 at every phase boundary on both engines: nothing lost, nothing pushed twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.faults import CHECKPOINTS

from .conftest import ENGINES, require_engine
from .killmatrix import kill_mid_agent_trial, kill_trial


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", CHECKPOINTS)
@pytest.mark.parametrize("engine", ENGINES)
def test_kill_at_checkpoint_recovers(tmp_path: Path, engine: str, checkpoint: str) -> None:
    """The daemon dies by SIGKILL at the checkpoint; a clean restart finishes the run once."""
    require_engine(engine)
    figures = kill_trial(tmp_path, engine, checkpoint)
    figures.assert_clean()
    assert figures.faults_injected == 1
    assert len(figures.recovery_s) == 1


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_kill_mid_agent_redoes_the_run_once(tmp_path: Path, engine: str) -> None:
    """kill -9 while the agent works: the orphan cannot push; the run is redone and pushed once."""
    require_engine(engine)
    figures = kill_mid_agent_trial(tmp_path, engine)
    figures.assert_clean()
    assert len(figures.recovery_s) == 1
