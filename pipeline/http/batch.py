"""The batch write endpoint: retry or cancel several runs in one request.

``POST /api/runs/batch`` with ``{"action": "retry"|"cancel", "runs": [ids]}``.
It is authorised like every other write (``check_token``: the API token, or a
signed-in ``write`` session with its CSRF header; the Origin check of
``pipeline.http.guard`` applies), and it acts on each run in turn with the
same store verbs as the one-run endpoints. One run refused (still running,
already ended, unknown) never stops the others: the answer is 200 with a
result per run, in the order asked.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pipeline.http.common import (
    MAX_ID,
    ApiContext,
    BadInput,
    check_int,
    check_token,
    context,
    frozen_note,
    json_object,
    run_json,
)
from pipeline.http.shapes import BatchJson, BatchOutcome, BatchResultJson
from pipeline.store import Run
from pipeline.store.runs import RunNotRetryable, UnknownRun

ACTOR = "api"
ACTIONS = ("retry", "cancel")
MAX_BATCH = 100
BATCH_FIELDS = frozenset({"action", "runs"})
Act = Callable[[ApiContext, int], BatchResultJson]


async def batch_runs(request: Request) -> Response:
    """POST /api/runs/batch: retry or cancel each listed run; 200 with one result per run."""
    refused = check_token(request)
    if refused is not None:
        return refused
    body = await json_object(request, BATCH_FIELDS)
    action = body.get("action")
    if action not in ACTIONS:
        raise BadInput("action", f"must be one of {', '.join(ACTIONS)}, got {action!r:.40}")
    run_ids = _run_ids(body.get("runs"))
    act: Act = _retry if action == "retry" else _cancel
    answer = await run_in_threadpool(_apply, context(request), action, run_ids, act)
    return JSONResponse(answer)


def _run_ids(value: object) -> list[int]:
    """1..MAX_BATCH run ids, each once, in the order given."""
    if not isinstance(value, list) or not value:
        raise BadInput("runs", f"must be a non-empty list of run ids (at most {MAX_BATCH})")
    if len(value) > MAX_BATCH:
        raise BadInput("runs", f"must list at most {MAX_BATCH} runs, got {len(value)}")
    ids = [check_int(f"runs[{n}]", item, 1, MAX_ID) for n, item in enumerate(value)]
    return list(dict.fromkeys(ids))


def _apply(ctx: ApiContext, action: str, run_ids: list[int], act: Act) -> BatchJson:
    results = [act(ctx, run_id) for run_id in run_ids]
    done = sum(1 for r in results if r["ok"])
    return {
        "action": "retry" if action == "retry" else "cancel",
        "results": results,
        "done": done,
        "refused": len(results) - done,
    }


def _not_found(run_id: int) -> BatchResultJson:
    return {"run_id": run_id, "ok": False, "outcome": "not_found", "message": "no such run"}


def _retry(ctx: ApiContext, run_id: int) -> BatchResultJson:
    try:
        result = ctx.store.retry_run(run_id, ACTOR)
    except UnknownRun:
        return _not_found(run_id)
    except RunNotRetryable as exc:
        return {"run_id": run_id, "ok": False, "outcome": "refused", "message": str(exc)}
    new = result.run
    note = frozen_note(ctx.store, new)
    waits = f"; {note}" if note else ""
    if result.created:
        return _result(run_id, "retried", f"queued again as run {new.id}{waits}", new)
    said = f"its issue already has run {new.id} under way{waits}"
    return _result(run_id, "already_active", said, new)


def _cancel(ctx: ApiContext, run_id: int) -> BatchResultJson:
    before = ctx.store.get_run(run_id)
    if before is None:
        return _not_found(run_id)
    if before.terminal:
        message = f"run {run_id} already ended ({before.state}); nothing to cancel"
        return {"run_id": run_id, "ok": False, "outcome": "refused", "message": message}
    try:
        after = ctx.store.cancel_run(run_id, ACTOR)
    except UnknownRun:
        return _not_found(run_id)
    if after.state == "cancelled":
        return _result(run_id, "cancelled", "cancelled before it started", after)
    if after.terminal:  # it ended on its own between the two reads
        message = f"run {run_id} ended ({after.state}) before the cancel reached it"
        return {"run_id": run_id, "ok": False, "outcome": "refused", "message": message}
    return _result(run_id, "cancel_requested", f"asked to stop ({after.state})", after)


def _result(run_id: int, outcome: BatchOutcome, message: str, run: Run) -> BatchResultJson:
    return {
        "run_id": run_id,
        "ok": True,
        "outcome": outcome,
        "message": message,
        "run": run_json(run),
    }
