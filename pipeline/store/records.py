"""Plain records the store hands out: the rest of the package never sees a row."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

from pipeline.core.states import TERMINAL_STATES

T = TypeVar("T")


def from_mapping(cls: type[T], row: Mapping[str, Any]) -> T:
    """Build dataclass ``cls`` from a row mapping, taking only its fields."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in row.items() if k in names})


@dataclass(frozen=True)
class Repo:
    id: int
    name: str
    tracker: str
    slug: str
    default_branch: str
    state: str
    frozen_reason: str | None = None
    frozen_run_id: int | None = None
    frozen_by: str | None = None
    frozen_at: datetime | None = None

    @property
    def frozen(self) -> bool:
        return self.state == "frozen"


@dataclass(frozen=True)
class Issue:
    id: int
    repo_id: int
    tracker: str
    number: int
    title: str
    author: str
    url: str
    external_id: str = ""
    labeller: str | None = None
    labelled_at: str | None = None
    labelled_title: str | None = None
    labelled_body: str | None = None
    labelled_remote_updated_at: str | None = None
    snapshot_taken_at: datetime | None = None
    waiting_reason: str | None = None
    waiting_since: datetime | None = None


@dataclass(frozen=True)
class Run:
    id: int
    repo_id: int
    kind: str
    state: str
    priority: int
    attempt: int
    failures: int
    recoveries: int
    max_attempts: int
    run_after: datetime
    created_at: datetime
    updated_at: datetime
    issue_id: int | None = None
    parent_id: int | None = None
    owner: str | None = None
    lease_until: datetime | None = None
    started_at: datetime | None = None
    deadline_at: datetime | None = None
    finished_at: datetime | None = None
    timeout_s: float | None = None
    cancel_requested: bool = False
    error_class: str | None = None
    error: str | None = None
    base_sha: str | None = None
    head_sha: str | None = None
    pushed_sha: str | None = None
    branch: str | None = None
    worktree: str | None = None
    agent_session: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    num_turns: int = 0
    setup_s: float | None = None
    summary: str | None = None
    requested_by: str | None = None
    repo_name: str = ""
    issue_number: int | None = None
    issue_title: str | None = None
    issue_url: str | None = None
    progress_comment_id: str | None = None  # the run's progress comment on its issue
    notifications_undelivered: int = 0  # notifications not (yet) delivered to a channel

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at or self.updated_at
        return max(0.0, (end - self.started_at).total_seconds())


@dataclass(frozen=True)
class RunEvent:
    id: int
    run_id: int
    attempt: int
    ts: datetime
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunEvent:
        try:
            data = json.loads(row["data_json"] or "{}")
        except ValueError:
            data = {"unparsed": row["data_json"]}
        return cls(
            id=row["id"],
            run_id=row["run_id"],
            attempt=row["attempt"],
            ts=row["ts"],
            kind=row["kind"],
            message=row["message"],
            data=data if isinstance(data, dict) else {"value": data},
        )


@dataclass(frozen=True)
class Escalation:
    id: int
    repo_id: int
    reason: str
    detail: str
    created_at: datetime
    run_id: int | None = None
    notified: str = ""
    acknowledged_by: str | None = None
    acknowledged_at: datetime | None = None
    repo_name: str = ""
    repo_frozen: bool = False
    # One of the escalations of its repo's current freeze: only an unfreeze answers it.
    of_freeze: bool = False

    @property
    def acknowledged(self) -> bool:
        return self.acknowledged_at is not None


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing shows. ``since`` is inclusive, ``until`` exclusive (created_at);
    ``text`` matches the issue title, the repo name or the error, ignoring case;
    ``repo_state`` is the repo's current state (``active`` or ``frozen``)."""

    repo: str | None = None
    state: str | None = None
    kind: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None
    repo_state: str | None = None
    issue_id: int | None = None
    limit: int = 50
    offset: int = 0


@dataclass(frozen=True)
class Stats:
    runs_by_state: dict[str, int]
    runs_by_kind: dict[str, int]
    queued_by_repo: dict[str, int]
    active: int
    cost_usd: float
    tokens_in: int
    tokens_out: int
    frozen_repos: tuple[str, ...]
