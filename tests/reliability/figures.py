"""Measured figures of one campaign scenario, as the runner and the tests see them."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Figures:
    """What one scenario measured; zero is the only passing value of the counters."""

    scenario: str
    engine: str = "-"
    trials: int = 0
    # What one trial is: a crash, fault, pause or security "trial", a soak "issue", a fuzz
    # "input". Totals add only figures of one unit.
    unit: str = "trials"
    faults_injected: int = 0
    invariant_violations: list[str] = field(default_factory=list)
    lost_issues: list[str] = field(default_factory=list)
    double_pushes: list[str] = field(default_factory=list)  # issues shipped more than once
    duplicate_comments: list[str] = field(default_factory=list)
    leaked_secrets: list[str] = field(default_factory=list)
    misclassified: list[str] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)
    throughput_per_min: float | None = None
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def merge(self, other: Figures) -> None:
        self.trials += other.trials
        self.faults_injected += other.faults_injected
        for name in (
            "invariant_violations",
            "lost_issues",
            "double_pushes",
            "duplicate_comments",
            "leaked_secrets",
            "misclassified",
            "recovery_s",
            "notes",
        ):
            getattr(self, name).extend(getattr(other, name))
        self.duration_s += other.duration_s

    @property
    def problems(self) -> list[str]:
        return [
            *self.invariant_violations,
            *self.lost_issues,
            *self.double_pushes,
            *self.duplicate_comments,
            *self.leaked_secrets,
            *self.misclassified,
        ]

    def recovery_p50(self) -> float | None:
        return statistics.median(self.recovery_s) if self.recovery_s else None

    def recovery_max(self) -> float | None:
        return max(self.recovery_s) if self.recovery_s else None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["recovery_p50_s"] = self.recovery_p50()
        data["recovery_max_s"] = self.recovery_max()
        return data

    def assert_clean(self) -> None:
        """Fail with every problem named when any counter is not zero."""
        assert not self.problems, f"{self.scenario} ({self.engine}): " + "; ".join(self.problems)
