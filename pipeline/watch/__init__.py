"""Watching a pushed SHA: its CI verdict, then its deploy's health."""

from __future__ import annotations

from pipeline.watch.ci import (
    CiOutcome,
    CiSource,
    CiState,
    CiWatchAids,
    NoCi,
    TrackerCiSource,
    WoodpeckerCiSource,
    ci_source,
    judge_woodpecker,
    watch_ci,
)
from pipeline.watch.deploy import (
    DeployOutcome,
    ProbeResult,
    command_probe,
    http_probe,
    watch_deploy,
)

__all__ = [
    "CiOutcome",
    "CiSource",
    "CiState",
    "CiWatchAids",
    "DeployOutcome",
    "NoCi",
    "ProbeResult",
    "TrackerCiSource",
    "WoodpeckerCiSource",
    "ci_source",
    "command_probe",
    "http_probe",
    "judge_woodpecker",
    "watch_ci",
    "watch_deploy",
]
