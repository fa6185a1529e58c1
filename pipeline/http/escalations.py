"""Escalations over HTTP: ``GET /api/escalations`` and ``POST /api/escalations/{id}/ack``.

The read follows the other reads (the read token or a session once one is
configured, see ``guard``); the acknowledgement follows the other writes
(``check_token``: the API token, or a write session with its CSRF header).
Both say what ``pipeline escalations`` says, from the same text builders.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import cast

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pipeline.http.common import (
    MAX_ID,
    ApiContext,
    check_text,
    check_token,
    context,
    error,
    iso,
    json_object,
    query_choice,
)
from pipeline.http.shapes import EscalationJson
from pipeline.notify.escalation import ack_refusals, escalation_next_step
from pipeline.store.escalations import AckRefused, note_room
from pipeline.store.records import Escalation

ACTOR = "api"  # as the other writes record it
NOTE_FIELDS = frozenset({"note"})
SHOW = ("open", "all")


def escalation_json(escalation: Escalation) -> EscalationJson:
    data = {k: iso(v) if isinstance(v, datetime) else v for k, v in asdict(escalation).items()}
    data["repo"] = data.pop("repo_name")
    data["acknowledged"] = escalation.acknowledged
    data["next_step"] = None if escalation.acknowledged else escalation_next_step(escalation)
    return cast(EscalationJson, data)


def list_escalations(request: Request) -> Response:
    """GET /api/escalations: open ones oldest first; ``?show=all`` adds acknowledged ones."""
    every = query_choice(request.query_params, "show", SHOW) == "all"
    found = context(request).store.open_escalations(include_acknowledged=every)
    return JSONResponse({"escalations": [escalation_json(e) for e in found]})


async def ack_escalation(request: Request) -> Response:
    """POST /api/escalations/{id}/ack: acknowledged by ``api: <note>``."""
    refused = check_token(request)
    if refused is not None:
        return refused
    body = await json_object(request, NOTE_FIELDS)
    note = check_text("note", body.get("note", ""), note_room(ACTOR), allow_newlines=True)
    escalation_id: int = request.path_params["escalation_id"]
    if not 1 <= escalation_id <= MAX_ID:
        return error(404, f"escalation {escalation_id}: no such escalation")
    by = f"{ACTOR}: {note.strip() or 'acknowledged from the API'}"
    return await run_in_threadpool(_ack, context(request), escalation_id, by)


def _ack(ctx: ApiContext, escalation_id: int, by: str) -> Response:
    try:
        (done,) = ctx.store.acknowledge_escalations([escalation_id], by)
    except AckRefused as exc:
        return error(404 if exc.unknown else 409, "; ".join(ack_refusals(exc)))
    return JSONResponse(escalation_json(done))
