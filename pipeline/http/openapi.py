"""The OpenAPI 3 description of the HTTP API, served at ``/openapi.json``.

The response schemas are generated from the handlers' own types
(``pipeline.http.shapes``); the paths and request schemas are written here.
A test checks that every route of the app is described, and the fuzz test
generates requests from the description against a live server and checks
every answer against the declared status codes, content types and schemas.
"""

from __future__ import annotations

from typing import Any

from pipeline import __version__
from pipeline.core.states import REPO_STATES, RUN_KINDS
from pipeline.core.when import AGE, VALID_FORMS
from pipeline.http.batch import ACTIONS, MAX_BATCH
from pipeline.http.common import MAX_ID, MAX_NAME, MAX_NOTE, MAX_OFFSET, MAX_PAGE, PRIORITY_RANGE
from pipeline.http.escalations import ACTOR
from pipeline.http.metrics import RUN_STATES
from pipeline.http.shapes import component_schemas
from pipeline.http.sse import EVENT_MAPPING
from pipeline.store.escalations import note_room

Schema = dict[str, Any]

# No control characters (a note may hold newlines and tabs).
NAME_PATTERN = "^[^\\x00-\\x1f\\x7f]+$"
NOTE_PATTERN = "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]*$"
# A search text: no control characters at all, and blank means no search.
TEXT_PATTERN = "^[^\\x00-\\x1f\\x7f]*$"

# The forms ``pipeline.core.when`` accepts, each as its own schema so a generated value
# of any of them is one the server takes.
WHEN: Schema = {
    "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "date"},
        {"type": "string", "pattern": f"^{AGE.pattern}$"},
        {"type": "string", "enum": ["today"]},
    ],
    "example": "24h",
}
WHEN_FORMS = f"{VALID_FORMS} (a bad value is a 422 listing these forms)"


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _schemas() -> dict[str, Schema]:
    """The generated response shapes, and the two request bodies."""
    enums = {name: {"state": RUN_STATES} for name in ("Run", "RunWithEvents", "Enqueued")}
    return {
        **component_schemas(enums),
        "EnqueueRequest": _enqueue_request(),
        "BatchRequest": _batch_request(),
        "NoteRequest": _note_request(MAX_NOTE),
        # An acknowledgement's (an unfreeze's) note is recorded as "api: <note>", 200 at most.
        "AckNoteRequest": _note_request(note_room(ACTOR)),
    }


def _note_request(most: int) -> Schema:
    note = {"type": "string", "maxLength": most, "pattern": NOTE_PATTERN}
    return {"type": "object", "additionalProperties": False, "properties": {"note": note}}


def _enqueue_request() -> Schema:
    issue = {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_ID,
        "description": "issue number on the repo's tracker",
    }
    priority = {
        "type": "integer",
        "minimum": PRIORITY_RANGE[0],
        "maximum": PRIORITY_RANGE[1],
        "default": 0,
    }
    repo = {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_NAME,
        "pattern": NAME_PATTERN,
        "example": "demo",
    }
    return {
        "type": "object",
        "required": ["repo", "issue"],
        "additionalProperties": False,
        "properties": {"repo": repo, "issue": issue, "priority": priority},
    }


def _batch_request() -> Schema:
    run_id = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
    return {
        "type": "object",
        "required": ["action", "runs"],
        "additionalProperties": False,
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "runs": {"type": "array", "items": run_id, "minItems": 1, "maxItems": MAX_BATCH},
        },
    }


def _json(schema: str, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _alive() -> Schema:
    status = {"type": "object", "properties": {"status": {"type": "string", "enum": ["ok"]}}}
    return {
        "description": "the process serves HTTP",
        "content": {"application/json": {"schema": status}},
    }


def _errors(*codes: int) -> dict[str, Schema]:
    text = {
        401: "missing or wrong bearer token",
        403: "no API token is configured",
        404: "not found",
        409: "not possible in the current state (the message says why)",
        422: "a malformed field (named in `field`)",
        429: "queue full; see the Retry-After header",
        413: "body too large",
        503: "too many live event streams open; see the Retry-After header",
    }
    out = {str(c): _json("Error", text[c]) for c in codes}
    for code in {"429", "503"} & set(out):
        out[code]["headers"] = {
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
ACK_BODY = {"required": False, "content": {"application/json": {"schema": _ref("AckNoteRequest")}}}


def _list_params() -> list[Schema]:
    name = {"type": "string", "maxLength": MAX_NAME, "pattern": NAME_PATTERN}
    return [
        _param("repo", "query", name, "only this repo's runs"),
        _param("state", "query", {"type": "string", "enum": list(RUN_STATES)}),
        _param("kind", "query", {"type": "string", "enum": list(RUN_KINDS)}),
        _param("since", "query", WHEN, "runs created at or after this time; " + WHEN_FORMS),
        _param("until", "query", WHEN, "runs created before this time; " + WHEN_FORMS),
        _param(
            "text",
            "query",
            {"type": "string", "maxLength": MAX_NAME, "pattern": TEXT_PATTERN},
            "the issue title, repo name or error contains this text (any case)",
        ),
        _param(
            "repo_state",
            "query",
            {"type": "string", "enum": list(REPO_STATES)},
            "only runs of repos now in this state",
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


def _op(summary: str, operation_id: str, responses: Schema, **extra: Any) -> Schema:
    return {"summary": summary, "operationId": operation_id, **extra, "responses": responses}


def _enqueued(*codes: int) -> Schema:
    return {
        "202": _json("Enqueued", "queued"),
        "200": _json("Enqueued", "the issue's active run already"),
        **_errors(*codes),
    }


def _service_paths() -> dict[str, Schema]:
    health = {"200": _json("Health", "database reachable"), "503": _json("Health", "unreachable")}
    text = {"200": {"description": "text exposition format", "content": {"text/plain": {}}}}
    return {
        "/health": {"get": _op("Readiness and load", "health", health)},
        "/health/ready": {"get": _op("Readiness: the database is reachable", "ready", health)},
        "/health/live": {
            "get": _op("Liveness: never asks the database", "live", {"200": _alive()})
        },
        "/metrics": {"get": _op("Prometheus metrics", "metrics", text)},
        "/api/events": {"get": _events_path()},
        "/webhooks/{tracker}": {"post": _webhook_path()},
    }


def _events_path() -> Schema:
    bound = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
    stream = {"description": "an endless event stream", "content": {"text/event-stream": {}}}
    return _op(
        "Live events (server-sent events)",
        "events",
        {"200": stream, **_errors(422, 503)},
        description=_events_description(),
        parameters=[
            _param("after", "query", bound, "replay events after this id"),
            _param("Last-Event-ID", "header", bound),
        ],
    )


def _webhook_path() -> Schema:
    tracker = {"type": "string", "minLength": 1, "maxLength": MAX_NAME, "pattern": NAME_PATTERN}
    answers = {
        "200": _json("WebhookAnswer", "a delivery already handled (by its delivery id)"),
        "202": _json("WebhookAnswer", "accepted (the issue is queued) or ignored, with why"),
        "400": _json("WebhookAnswer", "a payload that cannot be read"),
        "401": _json("WebhookAnswer", "missing or wrong signature"),
        "403": _json("WebhookAnswer", "webhooks are not configured for this tracker"),
        **_errors(404, 413),
    }
    return _op(
        "A tracker's webhook delivery (issue labelled)",
        "webhook",
        answers,
        description="Signed with the tracker's webhook secret (GitHub X-Hub-Signature-256, "
        "Gitea/Forgejo X-Gitea-Signature or X-Forgejo-Signature, GitLab X-Gitlab-Token). "
        "The body is the tracker's own event JSON.",
        parameters=[_param("tracker", "path", tracker, "a tracker name from the config")],
        requestBody={"required": True, "content": {"application/json": {"schema": {}}}},
    )


def _run_paths() -> dict[str, Schema]:
    text = {"description": "plain text", "content": {"text/plain": {"schema": {"type": "string"}}}}
    body = {"required": True, "content": {"application/json": {"schema": _ref("EnqueueRequest")}}}
    listing = {"200": _json("RunList", "a page of runs"), **_errors(404, 422)}
    return {
        "/api/runs": {
            "get": _op("List runs, newest first", "listRuns", listing, parameters=_list_params()),
            "post": _op(
                "Enqueue a run by hand",
                "enqueueRun",
                _enqueued(*WRITE_ERRORS, 429),
                **WRITE,
                requestBody=body,
            ),
        },
        "/api/runs/{run_id}": {
            "get": _op(
                "A run with its events",
                "getRun",
                {"200": _json("RunWithEvents", "the run"), **_errors(404)},
                parameters=[RUN_ID],
            )
        },
        "/api/runs/{run_id}/log": {
            "get": _op(
                "A run's timeline as text",
                "runLog",
                {"200": text, **_errors(404)},
                parameters=[RUN_ID],
            )
        },
        **_run_actions(),
        "/api/runs/batch": {"post": _batch_path()},
    }


def _batch_path() -> Schema:
    body = {"required": True, "content": {"application/json": {"schema": _ref("BatchRequest")}}}
    return _op(
        "Retry or cancel several runs",
        "batchRuns",
        {"200": _json("Batch", "one result per run, in the order asked"), **_errors(401, 403, 422)},
        description="Each run is acted on as by its own retry/cancel endpoint; one refused "
        "(still running, already ended, unknown) does not stop the others.",
        requestBody=body,
        **WRITE,
    )


def _run_actions() -> dict[str, Schema]:
    cancelled = {"200": _json("Run", "the run after the request"), **_errors(*WRITE_ERRORS)}
    return {
        "/api/runs/{run_id}/cancel": {
            "post": _op("Cancel a run", "cancelRun", cancelled, parameters=[RUN_ID], **WRITE)
        },
        "/api/runs/{run_id}/retry": {
            "post": _op(
                "Queue a new run like a finished one",
                "retryRun",
                _enqueued(*WRITE_ERRORS, 409),
                parameters=[RUN_ID],
                **WRITE,
            )
        },
    }


def _repo_paths() -> dict[str, Schema]:
    answers = {"200": _json("Repo", "the repo"), **_errors(*WRITE_ERRORS)}

    def action(summary: str, operation_id: str, body: Schema = NOTE_BODY) -> Schema:
        return _op(summary, operation_id, answers, parameters=[REPO], requestBody=body, **WRITE)

    return {
        "/api/repos": {
            "get": _op("Enrolled repos", "listRepos", {"200": _json("RepoList", "every repo")})
        },
        "/api/repos/{repo}/freeze": {"post": action("Freeze a repo", "freezeRepo")},
        "/api/repos/{repo}/unfreeze": {"post": action("Unfreeze a repo", "unfreezeRepo", ACK_BODY)},
    }


def _escalation_paths() -> dict[str, Schema]:
    show = {"type": "string", "enum": ["open", "all"], "default": "open"}
    listing = {"200": _json("EscalationList", "oldest first"), **_errors(422)}
    esc_id = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
    acked = {"200": _json("Escalation", "acknowledged"), **_errors(*WRITE_ERRORS, 409)}
    return {
        "/api/escalations": {
            "get": _op(
                "Escalations waiting for a human, with the next step",
                "listEscalations",
                listing,
                description="Open: not acknowledged, nor settled by a later success of its "
                "issue (acknowledged_by `afk-pipeline: settled by run N, which succeeded`).",
                parameters=[_param("show", "query", show, "`all`: acknowledged ones too")],
            )
        },
        "/api/escalations/{escalation_id}/ack": {
            "post": _op(
                "Acknowledge an escalation",
                "ackEscalation",
                acked,
                description="409 when it is acknowledged already, or belongs to the freeze "
                "of a repo still frozen (unfreeze the repo instead).",
                parameters=[_param("escalation_id", "path", esc_id)],
                requestBody=ACK_BODY,
                **WRITE,
            )
        },
    }


def _paths() -> dict[str, Schema]:
    return {**_service_paths(), **_run_paths(), **_repo_paths(), **_escalation_paths()}


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
