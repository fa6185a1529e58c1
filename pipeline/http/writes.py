"""Write endpoints: manual enqueue, cancel, retry, freeze and unfreeze.

Every one needs ``Authorization: Bearer <token>`` with the token configured as
``[http] api_token_env`` / ``api_token_file`` (compared in constant time). With
no token configured, writes are refused with 403 and how to configure one.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pipeline.http.common import (
    MAX_ID,
    MAX_NOTE,
    PRIORITY_RANGE,
    ApiContext,
    check_int,
    check_name,
    check_text,
    check_token,
    context,
    error,
    frozen_note,
    json_object,
    path_id,
    repo_json,
    run_json,
)
from pipeline.store import UnknownRepo
from pipeline.store.escalations import note_room
from pipeline.store.pushed import pushed_run
from pipeline.store.roles import ApiStore
from pipeline.store.runs import (
    EnqueueOptions,
    EnqueueResult,
    QueueFull,
    RunNotRetryable,
    UnknownRun,
)

ACTOR = "api"
ENQUEUE_FIELDS = frozenset({"repo", "issue", "priority"})
NOTE_FIELDS = frozenset({"note"})


async def enqueue_run(request: Request) -> Response:
    """POST /api/runs: 202 with the new run, 200 with the issue's active run, or 429."""
    refused = check_token(request)
    if refused is not None:
        return refused
    body = await json_object(request, ENQUEUE_FIELDS)
    if "repo" not in body:
        return error(422, "repo: required (the name of an enrolled repo)", field="repo")
    repo = check_name("repo", body["repo"])
    priority = check_int("priority", body.get("priority", 0), *PRIORITY_RANGE)
    if body.get("issue") is None:  # a run without an issue would have no task to work on
        return error(422, "issue: required (the number of an issue intake has seen)", field="issue")
    issue = check_int("issue", body["issue"], 1, MAX_ID)
    return await run_in_threadpool(_enqueue, context(request), repo, issue, priority)


def _enqueue(ctx: ApiContext, repo: str, issue: int, priority: int) -> Response:
    store = ctx.store
    found = store.find_issue(repo, issue)
    if found is None:
        return error(
            404,
            f"issue #{issue} of repo {repo!r} has not been seen by intake; label it "
            "ready-for-agent on its tracker",
        )
    pushed = pushed_run(store, found.id)  # its change is on the branch: watch it again
    try:
        options = EnqueueOptions(
            issue_id=found.id,
            priority=priority,
            requested_by=ACTOR,
            max_queue_depth=ctx.settings.max_queue_depth,
            pushed_sha=pushed.pushed_sha if pushed else None,
            base_sha=pushed.base_sha if pushed else None,
        )
        result = store.enqueue(repo, options)
    except UnknownRepo as exc:
        return error(404, str(exc))
    except QueueFull as exc:
        retry_after = str(max(1, math.ceil(exc.retry_after_s)))
        return error(
            429, str(exc), depth=exc.depth, limit=exc.limit, headers={"Retry-After": retry_after}
        )
    return _enqueued(store, result)


def _enqueued(store: ApiStore, result: EnqueueResult) -> Response:
    """The run, whether it is new, and, in a frozen repo, that it waits for an unfreeze."""
    note = frozen_note(store, result.run)
    return JSONResponse(
        {**run_json(result.run), "created": result.created, "note": note},
        status_code=202 if result.created else 200,
    )


async def cancel_run(request: Request) -> Response:
    """POST /api/runs/{id}/cancel: a waiting run ends now, a busy one is asked to stop."""
    return await _run_action(request, _cancel)


async def retry_run(request: Request) -> Response:
    """POST /api/runs/{id}/retry: queue a new run like a failed/escalated/cancelled one."""
    return await _run_action(request, _retry)


def _cancel(ctx: ApiContext, run_id: int) -> Response:
    return JSONResponse(run_json(ctx.store.cancel_run(run_id, ACTOR)))


def _retry(ctx: ApiContext, run_id: int) -> Response:
    try:
        return _enqueued(ctx.store, ctx.store.retry_run(run_id, ACTOR))
    except RunNotRetryable as exc:
        return error(409, str(exc))


async def _run_action(request: Request, action: Any) -> Response:
    refused = check_token(request)
    if refused is not None:
        return refused
    await json_object(request, frozenset())
    run_id = path_id(request)
    shown = request.path_params["run_id"]
    if run_id is None:
        return error(404, f"run {shown} does not exist")
    try:
        response: Response = await run_in_threadpool(action, context(request), run_id)
    except UnknownRun as exc:
        return error(404, str(exc))
    return response


async def freeze_repo(request: Request) -> Response:
    """POST /api/repos/{repo}/freeze: its queue stops until someone unfreezes it."""
    return await _repo_action(request, frozen=True)


async def unfreeze_repo(request: Request) -> Response:
    """POST /api/repos/{repo}/unfreeze: its queue runs again; its freeze's escalations acked."""
    return await _repo_action(request, frozen=False)


async def _repo_action(request: Request, *, frozen: bool) -> Response:
    refused = check_token(request)
    if refused is not None:
        return refused
    name = check_name("repo", request.path_params["repo"])
    body = await json_object(request, NOTE_FIELDS)
    # An unfreeze's note goes where its freeze's escalations record who acknowledged them.
    most = MAX_NOTE if frozen else note_room(ACTOR)
    note = check_text("note", body.get("note", ""), most, allow_newlines=True)
    note = note.strip() or ("frozen from the API" if frozen else "unfrozen from the API")
    return await run_in_threadpool(_set_frozen, context(request), name, note, frozen)


def _set_frozen(ctx: ApiContext, name: str, note: str, frozen: bool) -> Response:
    store = ctx.store
    try:
        if frozen:
            changed = store.freeze_repo(name, note, ACTOR, escalation=f"frozen by {ACTOR}: {note}")
        else:
            changed = store.unfreeze_repo(name, note, ACTOR)
    except UnknownRepo as exc:
        return error(404, str(exc))
    repo = store.get_repo(name)
    if repo is None:  # removed between the two calls
        return error(404, f"repo {name!r} is not enrolled")
    queued = store.stats().queued_by_repo.get(name, 0)
    return JSONResponse({**repo_json(repo, queued), "changed": changed})
