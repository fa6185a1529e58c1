"""The dashboard: server-rendered HTML over the same store verbs as the API.

Jinja2 with autoescaping renders every page, so an issue title or an agent's
message is always shown as text. Pages carry a Content-Security-Policy that
allows only this server's own script and style (no inline script at all).
Live updates: ``static/live.js`` listens to ``/api/events`` and refetches the
page's fragment (``/fragments/...``), which the server renders and escapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from pipeline.core.states import REPO_STATES, RUN_KINDS
from pipeline.core.when import utc_now
from pipeline.http import timeline
from pipeline.http.budgets import budget_lines, midnight_utc
from pipeline.http.common import BadInput, context, frozen_note, path_id
from pipeline.http.metrics import RUN_STATES
from pipeline.http.runs import NoSuchRepo, check_repo, run_filter
from pipeline.http.session import request_session
from pipeline.store import RunFilter

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
PAGE_SIZE = 50
# The query parameters a runs page keeps in its links (pager, live fragment, views).
FILTER_KEYS = ("repo", "state", "kind", "since", "until", "text", "repo_state")
# One-click views of the runs page: plain, bookmarkable filter URLs.
SAVED_VIEWS = (
    ("Failed today", {"state": "failed", "since": "today"}),
    ("Escalated", {"state": "escalated"}),
    ("Frozen repos", {"repo_state": "frozen"}),
    ("Last 24 h", {"since": "24h"}),
)
TAIL_KEYS = ("tail", "output", "stdout", "stderr", "output_tail", "log", "diff", "input")
INLINE_MAX = 160


@dataclass(frozen=True)
class ShownData:
    tails: list[tuple[str, str]]
    inline: str
    rest: str


def shown_data(data: dict[str, Any]) -> ShownData:
    """Event data as output tails (blocks), a short ``k=v`` line, or else JSON details."""
    tails = []
    rest = {}
    for key, value in data.items():
        if isinstance(value, str) and (key in TAIL_KEYS or "\n" in value):
            tails.append((key, value))
        else:
            rest[key] = value
    inline = " · ".join(f"{k}={_short(v)}" for k, v in sorted(rest.items()))
    if len(inline) <= INLINE_MAX:
        return ShownData(tails, inline, "")
    return ShownData(tails, "", json.dumps(rest, indent=2, sort_keys=True, default=str))


def _short(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def fmt_ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "-"


def fmt_clock(value: datetime | None) -> str:
    return value.strftime("%H:%M:%S") if value is not None else ""


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def fmt_money(value: float | None) -> str:
    return f"${value:.2f}" if value else "-"


def web_url(value: str | None) -> bool:
    """Only http(s) links are rendered as links (never ``javascript:`` and the like)."""
    return bool(value) and str(value).lower().startswith(("http://", "https://"))


def make_env() -> Environment:
    env = Environment(
        loader=PackageLoader("pipeline.http", "templates"), autoescape=True, auto_reload=False
    )
    env.filters.update(
        ts=fmt_ts,
        clock=fmt_clock,
        dur=fmt_duration,
        money=fmt_money,
        shown_data=shown_data,
        web_url=web_url,
    )
    return env


ENV = make_env()


def render(name: str, status: int = 200, **values: Any) -> Response:
    html = ENV.get_template(name).render(**values)
    return HTMLResponse(html, status_code=status, headers={"Content-Security-Policy": CSP})


def page(request: Request, name: str, status: int = 200, **values: Any) -> Response:
    """A full page: ``render`` with the browser's session (sign-in state, CSRF token)."""
    return render(name, status, session=request_session(request), **values)


def _params(request: Request) -> dict[str, str]:
    # A filter form sends empty fields for "all": drop them (the API is strict).
    return {k: v for k, v in request.query_params.items() if v}


def _filters(request: Request) -> RunFilter | Response:
    try:
        flt = check_repo(context(request).store, run_filter(_params(request), PAGE_SIZE))
    except BadInput as exc:
        return render("not_found.html", 422, message=str(exc), nav="runs", title="Bad filter")
    except NoSuchRepo as exc:
        return render("not_found.html", 404, message=str(exc), nav="runs", title="No such repo")
    return flt


def _query(params: dict[str, str], offset: int | None = None) -> str:
    """The filters as written (``since=24h`` stays relative), the page size, a page offset."""
    kept = {k: params[k] for k in (*FILTER_KEYS, "limit") if k in params}
    if offset:
        kept["offset"] = str(offset)
    return "?" + urlencode(kept) if kept else ""


def _views(params: dict[str, str]) -> list[dict[str, Any]]:
    shown = {k: params[k] for k in FILTER_KEYS if k in params}
    return [
        {"label": label, "url": "/" + _query(query), "current": query == shown}
        for label, query in SAVED_VIEWS
    ]


def _runs_values(request: Request, flt: RunFilter) -> dict[str, Any]:
    store = context(request).store
    stats = store.stats()
    total = store.count_runs(flt)
    params = _params(request)
    health = {
        "active": stats.active,
        "capacity": context(request).settings.max_concurrency,
        "queued": sum(stats.queued_by_repo.values()),
        "frozen_repos": stats.frozen_repos,
    }
    after = flt.offset + flt.limit
    # Past the last run (an old link, or runs that left the filter): "newer" is the last page.
    newer = min(flt.offset - flt.limit, max(0, (total - 1) // flt.limit * flt.limit))
    narrowed = any(k in params for k in FILTER_KEYS if k != "repo")
    return {
        "flt": flt,
        "params": params,
        "runs": store.list_runs(flt),
        "waiting": store.waiting_issues(flt.repo) if not narrowed else [],
        "total": total,
        "health": health,
        "filtered": any(k in params for k in FILTER_KEYS),
        "kinds": sorted(set(RUN_KINDS) | set(stats.runs_by_kind)),
        "prev_url": ("/" + _query(params, max(0, newer))) if flt.offset else None,
        "next_url": ("/" + _query(params, after)) if after < total else None,
    }


def runs_page(request: Request) -> Response:
    """GET /: the runs table with filters; live refresh via /fragments/runs."""
    flt = _filters(request)
    if isinstance(flt, Response):
        return flt
    return page(
        request,
        "runs.html",
        nav="runs",
        repo_names=[r.name for r in context(request).store.list_repos()],
        states=RUN_STATES,
        repo_states=REPO_STATES,
        views=_views(_params(request)),
        query=_query(_params(request), flt.offset),
        **_runs_values(request, flt),
    )


def runs_fragment(request: Request) -> Response:
    """GET /fragments/runs: the summary, table and pager alone, for live refresh."""
    flt = _filters(request)
    if isinstance(flt, Response):
        return flt
    return page(request, "runs_live.html", **_runs_values(request, flt))


def _run_values(request: Request) -> dict[str, Any] | None:
    run_id = path_id(request)
    store = context(request).store
    run = store.get_run(run_id) if run_id is not None else None
    if run is None:
        return None
    events = store.run_events(run.id)
    return {
        "run": run,
        "events": events,
        "phases": timeline.group(events, run),
        "pushed_to": timeline.pushed_to(run, events),
        "budget": timeline.run_budget(context(request).settings, run),
        "frozen_note": frozen_note(store, run),  # a retry queued in a frozen repo waits
    }


def run_page(request: Request) -> Response:
    """GET /runs/{id}: a run's facts, cost and timeline."""
    values = _run_values(request)
    if values is None:
        message = f"Run {request.path_params['run_id']} does not exist."
        return render("not_found.html", 404, message=message, nav="runs")
    return page(request, "run.html", nav="runs", **values)


def run_fragment(request: Request) -> Response:
    """GET /fragments/runs/{id}: the run's facts and timeline alone, for live refresh."""
    values = _run_values(request)
    if values is None:
        return render("not_found.html", 404, message="no such run", nav="runs")
    return page(request, "run_detail.html", **values)  # the session: which actions to offer


def repos_page(request: Request) -> Response:
    """GET /repos: repos with their frozen state, today's spend and freeze/unfreeze forms."""
    ctx = context(request)
    store = ctx.store
    queued = store.stats().queued_by_repo
    repos = store.list_repos()
    spent = store.spend_since(midnight_utc(utc_now()))
    budgets = budget_lines([r.name for r in repos], ctx.settings.repos, spent)
    return page(request, "repos.html", nav="repos", repos=repos, queued=queued, budgets=budgets)
