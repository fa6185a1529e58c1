"""The JSON shapes the API answers with, as types: the handlers build them, the
OpenAPI description is generated from them (``schema_of``), so the two cannot drift.

A field that may be absent is ``NotRequired``; one that may be null is
``X | None``; a time is a ``Timestamp`` (RFC 3339, UTC, ``Z``).
"""

import types
from collections.abc import Mapping, Sequence
from typing import (
    Any,
    Literal,
    NewType,
    NotRequired,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

Schema = dict[str, Any]
Timestamp = NewType("Timestamp", str)


class RunJson(TypedDict):
    id: int
    repo_id: int
    repo: str
    kind: str
    state: str
    priority: int
    attempt: int
    failures: int
    recoveries: int
    max_attempts: int
    run_after: Timestamp
    created_at: Timestamp
    updated_at: Timestamp
    issue_id: int | None
    parent_id: int | None
    owner: str | None
    lease_until: Timestamp | None
    started_at: Timestamp | None
    deadline_at: Timestamp | None
    finished_at: Timestamp | None
    timeout_s: float | None
    cancel_requested: bool
    error_class: str | None
    error: str | None
    base_sha: str | None
    head_sha: str | None
    pushed_sha: str | None
    branch: str | None
    worktree: str | None
    agent_session: str | None
    tokens_in: int
    tokens_out: int
    cost_usd: float
    num_turns: int
    setup_s: float | None
    summary: str | None
    requested_by: str | None
    issue_number: int | None
    issue_title: str | None
    issue_url: str | None
    progress_comment_id: str | None
    notifications_undelivered: int
    duration_s: float | None
    terminal: bool


class EventJson(TypedDict):
    id: int
    run_id: int
    attempt: int
    ts: Timestamp
    kind: str
    message: str
    data: dict[str, Any]


class RunWithEventsJson(RunJson):
    events: list[EventJson]


class EnqueuedJson(RunJson):
    created: bool
    note: str | None  # set when the repo is frozen: the run waits for an unfreeze


class RunListJson(TypedDict):
    runs: list[RunJson]
    total: int
    limit: int
    offset: int


BatchOutcome = Literal[
    "retried", "already_active", "cancelled", "cancel_requested", "refused", "not_found"
]


class BatchResultJson(TypedDict):
    """One run's answer in a batch: ``ok`` false when it was refused (and ``message`` says why)."""

    run_id: int
    ok: bool
    outcome: BatchOutcome
    message: str
    run: NotRequired[RunJson]


class BatchJson(TypedDict):
    action: Literal["retry", "cancel"]
    results: list[BatchResultJson]
    done: int
    refused: int


class RepoJson(TypedDict):
    id: int
    name: str
    tracker: str
    slug: str
    default_branch: str
    state: Literal["active", "frozen"]
    frozen_reason: str | None
    frozen_run_id: int | None
    frozen_by: str | None
    frozen_at: Timestamp | None
    frozen: bool
    queued: int
    changed: NotRequired[bool]


class RepoListJson(TypedDict):
    repos: list[RepoJson]


class EscalationJson(TypedDict):
    """A call for a human: open until acknowledged (by a human, or settled by a later
    success of its issue); ``next_step`` is the command to run."""

    id: int
    repo_id: int
    repo: str
    run_id: int | None
    reason: str
    detail: str
    notified: str
    created_at: Timestamp
    acknowledged: bool
    acknowledged_by: str | None
    acknowledged_at: Timestamp | None
    repo_frozen: bool
    of_freeze: bool  # of its repo's current freeze: the unfreeze acknowledges it
    next_step: str | None


class EscalationListJson(TypedDict):
    escalations: list[EscalationJson]


class TrackerRefusedJson(TypedDict):
    """A repo whose tracker refuses its ready list: 401 or 403 (not a rate limit), the
    token; 404, the repo is missing or the token cannot see it."""

    tracker: str
    repo: str
    slug: str
    status: str
    since: Timestamp
    failures: int
    error: str


class HealthJson(TypedDict):
    status: Literal["ok", "degraded"]
    database: Literal["ok", "unreachable"]
    busy: bool
    active: int
    queued: int
    capacity: int
    frozen_repos: list[str]
    trackers_refused: NotRequired[list[TrackerRefusedJson]]


class ErrorJson(TypedDict):
    error: str
    field: NotRequired[str]
    depth: NotRequired[int]
    limit: NotRequired[int]


class WebhookJson(TypedDict):
    """What intake answers a delivery: accepted, ignored (and why), duplicate, or an error."""

    status: NotRequired[Literal["accepted", "ignored", "duplicate"]]
    reason: NotRequired[str]
    issue: NotRequired[int]
    delivery: NotRequired[str]
    error: NotRequired[str]


# The response shapes by the name the description gives them.
SHAPES: dict[str, type] = {
    "Run": RunJson,
    "Event": EventJson,
    "RunWithEvents": RunWithEventsJson,
    "Enqueued": EnqueuedJson,
    "RunList": RunListJson,
    "BatchResult": BatchResultJson,
    "Batch": BatchJson,
    "Repo": RepoJson,
    "RepoList": RepoListJson,
    "Escalation": EscalationJson,
    "EscalationList": EscalationListJson,
    "Health": HealthJson,
    "TrackerRefused": TrackerRefusedJson,
    "Error": ErrorJson,
    "WebhookAnswer": WebhookJson,
}
_NAMES = {shape: name for name, shape in SHAPES.items()}
_SCALARS: dict[object, Schema] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    Timestamp: {"type": "string", "format": "date-time"},
    Any: {},
}


def schema_of(shape: type, enums: Mapping[str, Sequence[str]] | None = None) -> Schema:
    """The OpenAPI 3.0 schema of a TypedDict; ``enums`` narrows string fields to values."""
    hints = get_type_hints(shape)
    properties = {name: type_schema(hint) for name, hint in hints.items()}
    for name, values in (enums or {}).items():
        properties[name] = {**properties[name], "enum": list(values)}
    required = sorted(getattr(shape, "__required_keys__", ()))
    schema: Schema = {"type": "object", "properties": properties}
    if required:  # OpenAPI 3.0: a required list is never empty
        schema["required"] = required
    return schema


def type_schema(hint: object) -> Schema:
    """The schema of one field's type; a named TypedDict becomes a reference."""
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if isinstance(hint, type) and is_typeddict(hint):
        return {"$ref": f"#/components/schemas/{_NAMES[hint]}"}
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) != 1:
            raise TypeError(f"only X | None unions are described, not {hint}")
        return {**type_schema(present[0]), "nullable": True}
    if origin is list:
        return {"type": "array", "items": type_schema(args[0])}
    if origin is dict:
        return {"type": "object"}
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    raise TypeError(f"no schema for {hint!r}")


def component_schemas(enums: Mapping[str, Mapping[str, Sequence[str]]]) -> dict[str, Schema]:
    """Every response shape's schema; ``enums[shape][field]`` narrows a string field."""
    return {name: schema_of(shape, enums.get(name)) for name, shape in SHAPES.items()}
