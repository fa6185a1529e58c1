"""A run's timeline for reading: events grouped by phase, like a CI job's steps.

A phase starts at each ``state`` event (``preparing`` → prepare,
``implementing`` → implement with its agent turns and tool calls, ``testing``
→ test gate, ``publishing`` → publish, ``watching`` → watch); events before
the first are the queue, a ``retry_wait``/``queued`` state or a ``recovery``
event opens recovery, a terminal state closes with the outcome. Each phase
knows its duration (to the next phase's start) and whether it went wrong, so
the page opens the phases worth reading and folds the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pipeline.config.settings import Settings
from pipeline.store import Run, RunEvent

PHASES = {
    "queued": "queue",
    "retry_wait": "recovery",
    "preparing": "prepare",
    "implementing": "implement",
    "testing": "test gate",
    "publishing": "publish",
    "watching": "watch",
    "succeeded": "outcome",
    "failed": "outcome",
    "escalated": "outcome",
    "cancelled": "outcome",
}
BAD_WORDS = ("fail", "error", " red", "conflict", "broken", "escalat", "timed out")


@dataclass
class Phase:
    name: str
    events: list[RunEvent] = field(default_factory=list)
    ended: datetime | None = None

    @property
    def started(self) -> datetime:
        return self.events[0].ts

    @property
    def duration_s(self) -> float | None:
        if self.ended is None:
            return None
        return max(0.0, (self.ended - self.started).total_seconds())

    @property
    def troubled(self) -> bool:
        """Whether something in it went wrong (the page opens it)."""
        return any(
            e.kind in ("recovery", "repo") or any(w in e.message.lower() for w in BAD_WORDS)
            for e in self.events
        )


def phase_of(event: RunEvent) -> str | None:
    """The phase an event opens, or None when it belongs to the current one."""
    if event.kind == "state":
        return PHASES.get(str((event.data or {}).get("state", "")), None)
    if event.kind == "recovery":
        return "recovery"
    return None


def group(events: list[RunEvent], run: Run) -> list[Phase]:
    """Consecutive events split into phases; the last one ends with the run."""
    phases: list[Phase] = []
    for event in events:
        name = phase_of(event)
        if not phases or (name is not None and name != phases[-1].name):
            if phases:
                phases[-1].ended = event.ts
            phases.append(Phase(name or "queue"))
        phases[-1].events.append(event)
    if phases:
        phases[-1].ended = run.finished_at if run.terminal else None
    return phases


def pushed_to(run: Run, events: list[RunEvent]) -> str | None:
    """The ref the run's commit was pushed to, from its publish events (not its work branch)."""
    for event in reversed(events):
        data = event.data or {}
        if event.kind == "publish" and data.get("ref") and data.get("sha") == run.pushed_sha:
            return str(data["ref"]).removeprefix("refs/heads/")
    return None


def run_budget(settings: Settings, run: Run) -> float | None:
    """The per-run budget that applied: the repo's, else its agent preset's."""
    repo = settings.repo(run.repo_name)
    if repo is None:
        return None
    if repo.max_budget_usd is not None:
        return repo.max_budget_usd
    preset = settings.agent(repo.agent)
    return preset.max_budget_usd if preset is not None else None
