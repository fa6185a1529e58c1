"""Read endpoints of the JSON API: runs, a run with its events, its log, repos.

Handlers are plain functions: Starlette runs them in its thread pool, so the
store's blocking calls never stall the event loop.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from pipeline.core.printable import indented, shown, shown_line
from pipeline.core.states import REPO_STATES, RUN_KINDS
from pipeline.http.common import (
    MAX_OFFSET,
    MAX_PAGE,
    Query,
    context,
    error,
    event_json,
    path_id,
    query_choice,
    query_int,
    query_name,
    query_text,
    query_time,
    repo_json,
    run_json,
)
from pipeline.http.metrics import RUN_STATES
from pipeline.store import Run, RunEvent, RunFilter
from pipeline.store.roles import ApiStore


def run_filter(params: Query, default_limit: int = 50) -> RunFilter:
    """The filters and page of a runs listing, from the query parameters."""
    # An empty window (until before since) is an empty list, not an error: the
    # description cannot say "until after since", and every value it allows is served.
    return RunFilter(
        repo=query_name(params, "repo"),
        state=query_choice(params, "state", RUN_STATES),
        kind=query_choice(params, "kind", RUN_KINDS),
        since=query_time(params, "since"),
        until=query_time(params, "until"),
        text=query_text(params, "text"),
        repo_state=query_choice(params, "repo_state", REPO_STATES),
        limit=query_int(params, "limit", default_limit, 1, MAX_PAGE),
        offset=query_int(params, "offset", 0, 0, MAX_OFFSET),
    )


class NoSuchRepo(Exception):
    """A ``repo`` filter naming no enrolled repo: a 404 in words, never an empty list."""


def check_repo(store: ApiStore, flt: RunFilter) -> RunFilter:
    """``flt`` when its repo is one the store knows (repos are never deleted, so history stays)."""
    if flt.repo is None:
        return flt
    known = [r.name for r in store.list_repos()]
    if flt.repo not in known:
        listed = ", ".join(known) if known else "none enrolled yet"
        raise NoSuchRepo(f"repo: no such repo {shown(flt.repo)!r} (known: {listed})")
    return flt


def list_runs(request: Request) -> Response:
    """GET /api/runs: newest first, with the total for the same filters."""
    store = context(request).store
    try:
        flt = check_repo(store, run_filter(request.query_params))
    except NoSuchRepo as exc:
        return error(404, str(exc), field="repo")
    runs = store.list_runs(flt)
    total = store.count_runs(flt)
    return JSONResponse(
        {
            "runs": [run_json(r) for r in runs],
            "total": total,
            "limit": flt.limit,
            "offset": flt.offset,
        }
    )


def _run_or_404(request: Request) -> Run | Response:
    run_id = path_id(request)
    run = context(request).store.get_run(run_id) if run_id is not None else None
    if run is None:
        shown = request.path_params["run_id"]
        return error(404, f"run {shown} does not exist (GET /api/runs lists runs)")
    return run


def get_run(request: Request) -> Response:
    """GET /api/runs/{id}: the run and its whole timeline."""
    run = _run_or_404(request)
    if isinstance(run, Response):
        return run
    events = context(request).store.run_events(run.id)
    return JSONResponse({**run_json(run), "events": [event_json(e) for e in events]})


def run_log(request: Request) -> Response:
    """GET /api/runs/{id}/log: the timeline as plain text, one event per line."""
    run = _run_or_404(request)
    if isinstance(run, Response):
        return run
    events = context(request).store.run_events(run.id)
    return PlainTextResponse(format_log(run, events))


def format_log(run: Run, events: list[RunEvent]) -> str:
    """A run's header and timeline as text a human reads in a terminal."""
    issue = f" issue #{run.issue_number}" if run.issue_number is not None else ""
    title = f" {shown_line(run.issue_title)}" if run.issue_title else ""
    lines = [
        f"run {run.id} ({run.kind}) {run.repo_name}{issue}{title}",
        f"state {run.state}, attempt {run.attempt}, cost ${run.cost_usd:.4f}, "
        f"tokens {run.tokens_in} in / {run.tokens_out} out",
    ]
    if run.error:
        lines.append(f"error ({run.error_class or 'error'}): {indented(run.error, 2)}")
    lines.append("")
    for event in events:
        stamp = event.ts.strftime("%Y-%m-%d %H:%M:%S")
        head = f"{stamp}  #{event.attempt} {event.kind:<8} "
        lines.append(head + indented(event.message, len(head)))
    return "\n".join(lines) + "\n"


def list_repos(request: Request) -> Response:
    """GET /api/repos: enrolled repos with frozen state and queue depth."""
    store = context(request).store
    queued = store.stats().queued_by_repo
    repos = [repo_json(r, queued.get(r.name, 0)) for r in store.list_repos()]
    return JSONResponse({"repos": repos})
