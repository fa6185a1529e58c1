"""The OpenAPI 3 description of the HTTP API, served at ``/openapi.json``.

Written by hand (it is small) and kept honest by the fuzz test, which
generates requests from it against a live server and checks every answer
against the declared status codes, content types and schemas.
"""

from __future__ import annotations

from typing import Any

from pipeline import __version__
from pipeline.http.common import MAX_ID, MAX_NAME, MAX_NOTE, MAX_OFFSET, MAX_PAGE, PRIORITY_RANGE
from pipeline.http.metrics import RUN_STATES
from pipeline.http.sse import EVENT_MAPPING

Schema = dict[str, Any]

# No control characters (a note may hold newlines and tabs).
NAME_PATTERN = "^[^\\x00-\\x1f\\x7f]+$"
NOTE_PATTERN = "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]*$"

_INT = (
    "id",
    "repo_id",
    "priority",
    "attempt",
    "failures",
    "recoveries",
    "max_attempts",
    "tokens_in",
    "tokens_out",
    "num_turns",
)
_OPT_INT = ("issue_id", "parent_id", "issue_number")
_STR = ("kind", "state", "repo")
_OPT_STR = (
    "owner",
    "error_class",
    "error",
    "base_sha",
    "head_sha",
    "pushed_sha",
    "branch",
    "worktree",
    "agent_session",
    "summary",
    "requested_by",
    "issue_title",
    "issue_url",
)
_TIME = ("run_after", "created_at", "updated_at")
_OPT_TIME = ("lease_until", "started_at", "deadline_at", "finished_at")
_OPT_NUM = ("timeout_s", "setup_s", "duration_s")


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _opt(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


def _run_schema() -> Schema:
    props: dict[str, Schema] = {}
    props.update({k: {"type": "integer"} for k in _INT})
    props.update({k: _opt({"type": "integer"}) for k in _OPT_INT})
    props.update({k: {"type": "string"} for k in _STR})
    props.update({k: _opt({"type": "string"}) for k in _OPT_STR})
    props.update({k: {"type": "string", "format": "date-time"} for k in _TIME})
    props.update({k: _opt({"type": "string", "format": "date-time"}) for k in _OPT_TIME})
    props.update({k: _opt({"type": "number"}) for k in _OPT_NUM})
    props.update(
        cost_usd={"type": "number"},
        cancel_requested={"type": "boolean"},
        terminal={"type": "boolean"},
    )
    props["state"] = {"type": "string", "enum": list(RUN_STATES)}
    return {"type": "object", "required": ["id", "repo", "kind", "state"], "properties": props}


def _schemas() -> dict[str, Schema]:
    event = {
        "type": "object",
        "required": ["id", "run_id", "ts", "kind", "message"],
        "properties": {
            "id": {"type": "integer"},
            "run_id": {"type": "integer"},
            "attempt": {"type": "integer"},
            "ts": {"type": "string", "format": "date-time"},
            "kind": {"type": "string"},
            "message": {"type": "string"},
            "data": {"type": "object"},
        },
    }
    repo = {
        "type": "object",
        "required": ["name", "state", "frozen", "queued"],
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "tracker": {"type": "string"},
            "slug": {"type": "string"},
            "default_branch": {"type": "string"},
            "state": {"type": "string", "enum": ["active", "frozen"]},
            "frozen": {"type": "boolean"},
            "queued": {"type": "integer"},
            "frozen_reason": _opt({"type": "string"}),
            "frozen_by": _opt({"type": "string"}),
            "frozen_run_id": _opt({"type": "integer"}),
            "frozen_at": _opt({"type": "string", "format": "date-time"}),
            "changed": {"type": "boolean"},
        },
    }
    run_list = {
        "type": "object",
        "required": ["runs", "total", "limit", "offset"],
        "properties": {
            "runs": {"type": "array", "items": _ref("Run")},
            "total": {"type": "integer"},
            "limit": {"type": "integer"},
            "offset": {"type": "integer"},
        },
    }
    with_events = {
        "allOf": [
            _ref("Run"),
            {
                "type": "object",
                "required": ["events"],
                "properties": {"events": {"type": "array", "items": _ref("Event")}},
            },
        ]
    }
    enqueued = {
        "allOf": [
            _ref("Run"),
            {
                "type": "object",
                "required": ["created"],
                "properties": {"created": {"type": "boolean"}},
            },
        ]
    }
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {"type": "string"},
                "field": {"type": "string"},
                "depth": {"type": "integer"},
                "limit": {"type": "integer"},
            },
        },
        "Run": _run_schema(),
        "Event": event,
        "RunWithEvents": with_events,
        "Enqueued": enqueued,
        "RunList": run_list,
        "Repo": repo,
        "RepoList": {
            "type": "object",
            "required": ["repos"],
            "properties": {"repos": {"type": "array", "items": _ref("Repo")}},
        },
        "Health": _health_schema(),
        "EnqueueRequest": {
            "type": "object",
            "required": ["repo"],
            "additionalProperties": False,
            "properties": {
                "repo": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_NAME,
                    "pattern": NAME_PATTERN,
                    "example": "demo",
                },
                "issue": _opt(
                    {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_ID,
                        "description": "issue number on the repo's tracker",
                    }
                ),
                "priority": {
                    "type": "integer",
                    "minimum": PRIORITY_RANGE[0],
                    "maximum": PRIORITY_RANGE[1],
                    "default": 0,
                },
            },
        },
        "NoteRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "note": {"type": "string", "maxLength": MAX_NOTE, "pattern": NOTE_PATTERN}
            },
        },
    }


def _health_schema() -> Schema:
    return {
        "type": "object",
        "required": ["status", "database", "busy", "active", "queued", "capacity", "frozen_repos"],
        "properties": {
            "status": {"type": "string", "enum": ["ok", "degraded"]},
            "database": {"type": "string", "enum": ["ok", "unreachable"]},
            "busy": {"type": "boolean"},
            "active": {"type": "integer"},
            "queued": {"type": "integer"},
            "capacity": {"type": "integer"},
            "frozen_repos": {"type": "array", "items": {"type": "string"}},
        },
    }


def _json(schema: str, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _errors(*codes: int) -> dict[str, Schema]:
    text = {
        401: "missing or wrong bearer token",
        403: "no API token is configured",
        404: "not found",
        409: "not possible in the run's state",
        422: "a malformed field (named in `field`)",
        429: "queue full; see the Retry-After header",
        413: "body too large",
    }
    out = {str(c): _json("Error", text[c]) for c in codes}
    if 429 in codes:
        out["429"]["headers"] = {
            "Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}
        }
    return out


def _param(name: str, where: str, schema: Schema, description: str = "") -> Schema:
    param = {"name": name, "in": where, "required": where == "path", "schema": schema}
    if description:
        param["description"] = description
    return param


RUN_ID = _param("run_id", "path", {"type": "integer", "minimum": 1, "maximum": MAX_ID})
REPO = _param(
    "repo",
    "path",
    {"type": "string", "minLength": 1, "maxLength": MAX_NAME, "pattern": "^[^\\x00-\\x1f\\x7f/]+$"},
)
WRITE: dict[str, Any] = {"security": [{"bearer": []}]}
WRITE_ERRORS = (401, 403, 404, 422)
NOTE_BODY = {"required": False, "content": {"application/json": {"schema": _ref("NoteRequest")}}}


def _list_params() -> list[Schema]:
    name = {"type": "string", "maxLength": MAX_NAME, "pattern": NAME_PATTERN}
    return [
        _param("repo", "query", name, "only this repo's runs"),
        _param("state", "query", {"type": "string", "enum": list(RUN_STATES)}),
        _param("kind", "query", name, "issue or fix_forward"),
        _param(
            "since",
            "query",
            {"type": "string", "format": "date-time"},
            "runs created at or after this RFC 3339 time",
        ),
        _param(
            "limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}
        ),
        _param(
            "offset",
            "query",
            {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        ),
    ]


def _events_description() -> str:
    lines = [
        "One message per run event, oldest first; `id:` is the event id, so reconnecting "
        "with Last-Event-ID (or ?after=) resumes. `data:` is the event as JSON plus `event` "
        "and, for state changes, `state`. Comments (`: keep-alive`) are sent while idle. "
        "Event names:",
        "",
    ]
    lines += [f"- `{name}`: {when}" for name, when in EVENT_MAPPING]
    return "\n".join(lines)


def _paths() -> dict[str, Schema]:
    return {
        "/health": {
            "get": {
                "summary": "Liveness and load",
                "operationId": "health",
                "responses": {
                    "200": _json("Health", "database reachable"),
                    "503": _json("Health", "database unreachable"),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "operationId": "metrics",
                "responses": {
                    "200": {"description": "text exposition format", "content": {"text/plain": {}}}
                },
            }
        },
        "/api/runs": {
            "get": {
                "summary": "List runs, newest first",
                "operationId": "listRuns",
                "parameters": _list_params(),
                "responses": {"200": _json("RunList", "a page of runs"), **_errors(422)},
            },
            "post": {
                "summary": "Enqueue a run by hand",
                "operationId": "enqueueRun",
                **WRITE,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("EnqueueRequest")}},
                },
                "responses": {
                    "202": _json("Enqueued", "queued"),
                    "200": _json("Enqueued", "the issue's active run already"),
                    **_errors(*WRITE_ERRORS, 429),
                },
            },
        },
        "/api/runs/{run_id}": {
            "get": {
                "summary": "A run with its events",
                "operationId": "getRun",
                "parameters": [RUN_ID],
                "responses": {"200": _json("RunWithEvents", "the run"), **_errors(404)},
            }
        },
        "/api/runs/{run_id}/log": {
            "get": {
                "summary": "A run's timeline as text",
                "operationId": "runLog",
                "parameters": [RUN_ID],
                "responses": {
                    "200": {
                        "description": "plain text",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors(404),
                },
            }
        },
        "/api/runs/{run_id}/cancel": {
            "post": {
                "summary": "Cancel a run",
                "operationId": "cancelRun",
                "parameters": [RUN_ID],
                **WRITE,
                "responses": {
                    "200": _json("Run", "the run after the request"),
                    **_errors(*WRITE_ERRORS),
                },
            }
        },
        "/api/runs/{run_id}/retry": {
            "post": {
                "summary": "Queue a new run like a finished one",
                "operationId": "retryRun",
                "parameters": [RUN_ID],
                **WRITE,
                "responses": {
                    "202": _json("Enqueued", "queued"),
                    "200": _json("Enqueued", "the issue's active run already"),
                    **_errors(*WRITE_ERRORS, 409),
                },
            }
        },
        "/api/repos": {
            "get": {
                "summary": "Enrolled repos",
                "operationId": "listRepos",
                "responses": {"200": _json("RepoList", "every repo")},
            }
        },
        "/api/repos/{repo}/freeze": {
            "post": {
                "summary": "Freeze a repo",
                "operationId": "freezeRepo",
                "parameters": [REPO],
                **WRITE,
                "requestBody": NOTE_BODY,
                "responses": {"200": _json("Repo", "the repo"), **_errors(*WRITE_ERRORS)},
            }
        },
        "/api/repos/{repo}/unfreeze": {
            "post": {
                "summary": "Unfreeze a repo",
                "operationId": "unfreezeRepo",
                "parameters": [REPO],
                **WRITE,
                "requestBody": NOTE_BODY,
                "responses": {"200": _json("Repo", "the repo"), **_errors(*WRITE_ERRORS)},
            }
        },
        "/api/events": {
            "get": {
                "summary": "Live events (server-sent events)",
                "description": _events_description(),
                "operationId": "events",
                "parameters": [
                    _param(
                        "after",
                        "query",
                        {"type": "integer", "minimum": 0, "maximum": MAX_ID},
                        "replay events after this id",
                    ),
                    _param(
                        "Last-Event-ID",
                        "header",
                        {"type": "integer", "minimum": 0, "maximum": MAX_ID},
                    ),
                ],
                "responses": {
                    "200": {
                        "description": "an endless event stream",
                        "content": {"text/event-stream": {}},
                    },
                    **_errors(422),
                },
            }
        },
    }


def openapi_description() -> dict[str, Any]:
    """The OpenAPI 3.0 document (a fresh dict each call)."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "afk-pipeline",
            "version": __version__,
            "description": "Runs, repos, live events and operator actions of the pipeline "
            "daemon. Writes need 'Authorization: Bearer <token>' (config [http] "
            "api_token_env or api_token_file).",
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
