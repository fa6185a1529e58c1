"""Live events: the ``run_events`` table as a server-sent event stream.

``GET /api/events`` polls the store for events after the last one sent (every
``sse_poll_s``, 0.5 s by default) and writes each as one SSE message whose
``id:`` is the event's id, so a browser's automatic reconnect (which sends
``Last-Event-ID``) resumes exactly where it stopped. ``?after=N`` does the
same for clients that cannot set headers. A new client without either starts
at the newest event: it sees what happens from now on.

Event names come from the stored event's kind and data, as ``EVENT_MAPPING``
says (the same table is in the OpenAPI description of ``/api/events``).

Each message's data is one JSON object: the event (``id``, ``run_id``,
``attempt``, ``ts``, ``kind``, ``message``, ``data``) plus ``event`` (the name
above) and ``state`` when the event is a state change. A comment line
(``: keep-alive``) is sent when nothing happened for ``sse_keepalive_s``.
The stream ends when the client goes away or the server stops.

Every open stream polls the database, so at most ``max_streams`` (100) are
open at once; one more is answered 503 with ``Retry-After`` before it costs a
query, and a stream gives its place back however it ends.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from pipeline.http.common import (
    INTEGER,
    MAX_ID,
    ApiContext,
    BadInput,
    context,
    error,
    event_json,
)
from pipeline.store import RunEvent

EVENT_MAPPING: tuple[tuple[str, str], ...] = (
    (
        "run.queued",
        "kind 'queued' (a run was enqueued, or a retry queued), or kind 'state' "
        "with state 'queued' (the sweeper put it back in the queue)",
    ),
    ("run.started", "kind 'claimed' (a worker claimed it), or kind 'state' with 'preparing'"),
    (
        "run.progress",
        "every other event: states implementing, testing, publishing, watching, "
        "retry_wait; agent tool calls, test results, CI and deploy observations",
    ),
    ("run.succeeded", "kind 'state' with state 'succeeded'"),
    ("run.failed", "kind 'state' with state 'failed'"),
    ("run.cancelled", "kind 'state' with state 'cancelled'"),
    ("run.escalated", "kind 'state' with state 'escalated'"),
    ("repo.frozen", "kind 'repo' with data.frozen true"),
    ("repo.unfrozen", "kind 'repo' with data.frozen false"),
)
TERMINAL_EVENTS = {
    "succeeded": "run.succeeded",
    "failed": "run.failed",
    "cancelled": "run.cancelled",
    "escalated": "run.escalated",
}
BATCH = 200
RETRY_AFTER_S = 5
log = logging.getLogger(__name__)


def event_name(event: RunEvent) -> str:
    """The SSE event name for a stored run event (see the module docstring)."""
    if event.kind == "queued":
        return "run.queued"
    if event.kind == "claimed":
        return "run.started"
    if event.kind == "repo":
        return "repo.frozen" if event.data.get("frozen") else "repo.unfrozen"
    if event.kind == "state":
        state = str(event.data.get("state", ""))
        if state == "preparing":
            return "run.started"
        if state == "queued":
            return "run.queued"
        return TERMINAL_EVENTS.get(state, "run.progress")
    return "run.progress"


def sse_message(event: RunEvent) -> str:
    """One SSE message: ``id``, ``event`` and a one-line JSON ``data``."""
    payload: dict[str, Any] = dict(event_json(event))
    name = event_name(event)
    payload["event"] = name
    if event.kind == "state" and "state" in event.data:
        payload["state"] = event.data["state"]
    data = json.dumps(payload, default=str, separators=(",", ":"))
    return f"id: {event.id}\nevent: {name}\ndata: {data}\n\n"


def start_after(request: Request) -> int | None:
    """Where to resume: ``Last-Event-ID`` header, else ``?after=``; None = from now."""
    for name, raw in (
        ("Last-Event-ID", request.headers.get("last-event-id")),
        ("after", request.query_params.get("after")),
    ):
        if raw is None or raw.strip() == "":
            continue
        if not INTEGER.fullmatch(raw.strip()):
            raise BadInput(name, f"must be an event id (integer), got {raw[:40]!r}")
        value = int(raw.strip())
        if not 0 <= value <= MAX_ID:
            raise BadInput(name, f"must be between 0 and {MAX_ID}, got {value}")
        return value
    return None


async def events_endpoint(request: Request) -> Response:
    """GET /api/events: the live event stream."""
    ctx = context(request)
    after = start_after(request)
    if ctx.streams >= ctx.max_streams:
        return error(
            503,
            f"{ctx.streams} live event streams are open, the most this server keeps; "
            "reconnect later",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    ctx.streams += 1  # taken before the first await, so no two requests take the last place
    try:
        if after is None:
            after = await run_in_threadpool(ctx.store.last_event_id)
    except BaseException:
        ctx.streams -= 1
        raise
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return PlacedStream(
        ctx, stream_events(ctx, after), media_type="text/event-stream", headers=headers
    )


class PlacedStream(StreamingResponse):
    """An event stream holding one of ``ctx.max_streams`` places until it ends."""

    def __init__(self, ctx: ApiContext, content: AsyncIterator[str], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.ctx = ctx

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.ctx.streams -= 1


async def stream_events(ctx: ApiContext, after: int) -> AsyncIterator[str]:
    """Messages for events after ``after`` until the server closes.

    A client disconnect cancels this generator (Starlette watches for it). When
    the database fails the stream ends; the client reconnects after ``retry``
    milliseconds with ``Last-Event-ID`` and loses nothing.
    """
    yield f"retry: 2000\n: stream from event {after}\n\n"
    quiet_since = time.monotonic()
    while not ctx.closing.is_set():
        try:
            events = await run_in_threadpool(ctx.store.events_since, after, BATCH)
        except Exception as exc:  # the store's errors are its own types; any ends the stream
            log.warning("event stream stopped after event %d: %s", after, exc)
            yield ": database unavailable, reconnect later\n\n"
            return
        if events:
            after = events[-1].id
            quiet_since = time.monotonic()
            yield "".join(sse_message(e) for e in events)
            if len(events) == BATCH:
                continue
        elif time.monotonic() - quiet_since >= ctx.sse_keepalive_s:
            quiet_since = time.monotonic()
            yield ": keep-alive\n\n"
        await anyio.sleep(ctx.sse_poll_s)
