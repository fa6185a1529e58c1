"""Agent and git faults through the daemon: classified as expected, no crash, no repeat."""

from __future__ import annotations

from pathlib import Path

import pytest

from .faultmatrix import CASES, Case, fault_case
from .forgefaults import FORGE_FAULTS, ForgeFault, forge_fault


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fault_is_classified(tmp_path: Path, case: Case) -> None:
    """The run ends in the expected state and error class; the daemon stays up."""
    fault_case(tmp_path, case).assert_clean()


@pytest.mark.parametrize("fault", FORGE_FAULTS, ids=lambda f: f.name)
def test_forge_fault_is_survived(tmp_path: Path, fault: ForgeFault) -> None:
    """Intake reports the fault classified, backs off, then enqueues once; no duplicate comment."""
    forge_fault(tmp_path, fault).assert_clean()
