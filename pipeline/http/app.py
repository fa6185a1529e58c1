"""HTTP: health, metrics, the JSON API, live events, webhooks and the dashboard.

``create_app`` builds a Starlette app over a ``Store``; ``serve`` runs it with
uvicorn in a thread (the daemon and the tests use it). The OpenAPI description
is served at ``/openapi.json``; ``/api`` points to it. Every text response is
masked for registered secrets on its way out (``pipeline.http.masking``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import socket
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, cast

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from pipeline.config.settings import Settings
from pipeline.http import batch as api_batch
from pipeline.http import dashboard, signin
from pipeline.http import escalations as api_escalations
from pipeline.http import runs as api_runs
from pipeline.http import writes as api_writes
from pipeline.http.common import (
    ApiContext,
    BadInput,
    BodyTooLarge,
    HealthExtra,
    WebhookHandler,
    WebhookResult,
    bad_input_response,
    context,
    error,
    read_bounded,
)
from pipeline.http.guard import GuardMiddleware
from pipeline.http.masking import MaskingMiddleware
from pipeline.http.metrics import CONTENT_TYPE, Metrics
from pipeline.http.openapi import openapi_description
from pipeline.http.sse import events_endpoint
from pipeline.store.roles import ApiStore


def health(request: Request) -> Response:
    """GET /health: 200 while the database answers, else 503 (for probes)."""
    ctx = context(request)
    body: dict[str, Any] = {
        "status": "ok",
        "database": "ok",
        "busy": False,
        "active": 0,
        "queued": 0,
        "capacity": ctx.settings.max_concurrency,
        "frozen_repos": [],
    }
    try:
        reachable = ctx.store.ping()
        stats = ctx.store.stats() if reachable else None
    except Exception:  # any database failure is "unreachable" to a probe
        stats = None
    if stats is None:
        body.update(status="degraded", database="unreachable")
    else:
        body.update(
            active=stats.active,
            queued=sum(stats.queued_by_repo.values()),
            busy=stats.active >= ctx.settings.max_concurrency,
            frozen_repos=list(stats.frozen_repos),
        )
    if ctx.health_extra is not None:
        extra = dict(ctx.health_extra())
        degraded = extra.pop("status", None) == "degraded"
        body.update({k: v for k, v in extra.items() if k not in body})
        if degraded:
            body["status"] = "degraded"
    return JSONResponse(body, status_code=200 if stats is not None else 503)


def live(request: Request) -> Response:
    """GET /health/live: 200 while the process serves HTTP; never asks the database.

    For liveness probes: a database outage must not restart replicas (and kill
    their running agents); readiness (``/health/ready``, ``/health``) reports it.
    """
    return JSONResponse({"status": "ok"})


def metrics_endpoint(request: Request) -> Response:
    """GET /metrics: Prometheus text format."""
    return Response(context(request).metrics.render(), media_type=CONTENT_TYPE)


def openapi_endpoint(request: Request) -> Response:
    """GET /openapi.json: the OpenAPI 3 description of this API."""
    return JSONResponse(request.app.state.openapi)


def api_index(request: Request) -> Response:
    """GET /api: where the description and the main endpoints are."""
    return JSONResponse(
        {
            "openapi": "/openapi.json",
            "events": "/api/events",
            "runs": "/api/runs",
            "repos": "/api/repos",
            "escalations": "/api/escalations",
            "health": "/health",
            "liveness": "/health/live",
            "readiness": "/health/ready",
            "metrics": "/metrics",
            "auth": "write endpoints need 'Authorization: Bearer <token>' ([http] api_token_env); "
            "with [http] read_token_env set, reads need a bearer token or a session (/login)",
        }
    )


async def webhook(request: Request) -> Response:
    """POST /webhooks/{tracker}: handed to intake, which checks the signature."""
    handler = context(request).webhook_handler
    tracker = request.path_params["tracker"]
    if handler is None:
        return error(404, f"no webhook intake for tracker {tracker!r}")
    limit = context(request).settings.http.max_webhook_body_bytes
    try:
        body = await read_bounded(request, limit)
    except BodyTooLarge:
        return error(413, f"webhook body over {limit} bytes ([http] max_webhook_body_bytes)")
    headers = {k.lower(): v for k, v in request.headers.items()}
    if inspect.iscoroutinefunction(handler):
        result = await cast(Awaitable[WebhookResult], handler(tracker, headers, body))
    else:
        result = cast(WebhookResult, await run_in_threadpool(handler, tracker, headers, body))
    status, payload = result
    return JSONResponse(dict(payload), status_code=status)


async def runs_collection(request: Request) -> Response:
    """/api/runs: GET lists, POST enqueues (one route, so 405 lists both methods)."""
    if request.method == "POST":
        return await api_writes.enqueue_run(request)
    return await run_in_threadpool(api_runs.list_runs, request)


async def on_bad_input(request: Request, exc: Exception) -> Response:
    return bad_input_response(cast(BadInput, exc))


async def on_http_error(request: Request, exc: Exception) -> Response:
    http = cast(HTTPException, exc)
    if http.status_code == 404 and not request.url.path.startswith(("/api", "/webhooks")):
        return dashboard.render("not_found.html", 404, message=f"No page at {request.url.path}.")
    return error(http.status_code, str(http.detail), headers=http.headers)


def routes(settings: Settings) -> list[BaseRoute]:
    separate_webhooks = settings.http.webhook_listen is not None
    return [
        Route("/health", health),
        Route("/health/live", live),
        Route("/health/ready", health),
        Route("/login", signin.login_page, methods=["GET"]),
        Route("/login", signin.login, methods=["POST"]),
        Route("/logout", signin.logout, methods=["POST"]),
        Route("/metrics", metrics_endpoint),
        Route("/openapi.json", openapi_endpoint),
        Route("/api", api_index),
        Route("/api/events", events_endpoint),
        Route("/api/runs", runs_collection, methods=["GET", "POST"]),
        Route("/api/runs/batch", api_batch.batch_runs, methods=["POST"]),
        Route("/api/runs/{run_id:int}", api_runs.get_run),
        Route("/api/runs/{run_id:int}/log", api_runs.run_log),
        Route("/api/runs/{run_id:int}/cancel", api_writes.cancel_run, methods=["POST"]),
        Route("/api/runs/{run_id:int}/retry", api_writes.retry_run, methods=["POST"]),
        Route("/api/repos", api_runs.list_repos),
        Route("/api/repos/{repo}/freeze", api_writes.freeze_repo, methods=["POST"]),
        Route("/api/repos/{repo}/unfreeze", api_writes.unfreeze_repo, methods=["POST"]),
        Route("/api/escalations", api_escalations.list_escalations),
        Route(
            "/api/escalations/{escalation_id:int}/ack",
            api_escalations.ack_escalation,
            methods=["POST"],
        ),
        *([] if separate_webhooks else [Route("/webhooks/{tracker}", webhook, methods=["POST"])]),
        Route("/", dashboard.runs_page),
        Route("/fragments/runs", dashboard.runs_fragment),
        Route("/fragments/runs/{run_id:int}", dashboard.run_fragment),
        Route("/runs/{run_id:int}", dashboard.run_page),
        Route("/repos", dashboard.repos_page),
        Mount("/static", StaticFiles(packages=[("pipeline.http", "static")]), name="static"),
    ]


@dataclass(frozen=True)
class AppOptions:
    """What the daemon plugs into the app; the defaults serve the API alone."""

    webhook_handler: WebhookHandler | None = None
    health_extra: HealthExtra | None = None
    metrics: Metrics | None = None
    sse_poll_s: float = 0.5
    sse_keepalive_s: float = 15.0
    max_streams: int = 100


def create_app(store: ApiStore, settings: Settings, options: AppOptions | None = None) -> Starlette:
    """The HTTP app. ``app.state.metrics`` is the ``Metrics`` the daemon bumps."""
    options = options or AppOptions()
    metrics = options.metrics or Metrics()
    metrics.know_trackers(t.name for t in settings.trackers)
    metrics.watch_store(store, settings.max_concurrency)
    app = Starlette(
        routes=routes(settings),
        exception_handlers={BadInput: on_bad_input, HTTPException: on_http_error},
        middleware=[Middleware(MaskingMiddleware), Middleware(GuardMiddleware)],
    )
    app.state.ctx = ApiContext(
        store=store,
        settings=settings,
        metrics=metrics,
        webhook_handler=options.webhook_handler,
        health_extra=options.health_extra,
        sse_poll_s=options.sse_poll_s,
        sse_keepalive_s=options.sse_keepalive_s,
        max_streams=options.max_streams,
    )
    app.state.metrics = metrics
    app.state.openapi = openapi_description()
    return app


def create_webhook_app(
    store: ApiStore, settings: Settings, webhook_handler: WebhookHandler, metrics: Metrics
) -> Starlette:
    """The separate webhook listener (``[http] webhook_listen``): webhooks and liveness only.

    Exposing it to the forge exposes nothing else: no dashboard, API or events.
    """
    app = Starlette(
        routes=[
            Route("/health/live", live),
            Route("/webhooks/{tracker}", webhook, methods=["POST"]),
        ],
        middleware=[Middleware(MaskingMiddleware)],
    )
    app.state.ctx = ApiContext(
        store=store, settings=settings, metrics=metrics, webhook_handler=webhook_handler
    )
    return app


class QuietServer(uvicorn.Server):
    """uvicorn's server with a 1 s housekeeping tick instead of 0.1 s.

    The tick refreshes the Date header (to the second anyway) and checks for
    exit; ten wake-ups a second are most of an idle daemon's HTTP cost.
    ``request_exit`` ends the wait at once, so stopping is no slower.
    """

    tick_s = 1.0

    async def main_loop(self) -> None:
        self._exit_loop = asyncio.get_running_loop()
        self._exit_now = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000  # uvicorn's tick counts tenths of a second
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_now.wait(), self.tick_s)
            should_exit = await self.on_tick(counter)

    def request_exit(self) -> None:
        self.should_exit = True
        loop: asyncio.AbstractEventLoop | None = getattr(self, "_exit_loop", None)
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._exit_now.set)


@dataclass
class ServerHandle:
    """A uvicorn server running in a background thread."""

    server: QuietServer
    thread: threading.Thread
    app: Starlette
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self, timeout_s: float = 10.0) -> None:
        """End live streams, stop accepting, finish requests in flight, join the thread."""
        ctx: ApiContext = self.app.state.ctx
        ctx.closing.set()
        self.server.request_exit()
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout_s)


def serve(
    app: Starlette, host: str = "127.0.0.1", port: int = 0, *, startup_timeout_s: float = 10.0
) -> ServerHandle:
    """Run ``app`` on ``host:port`` (0 picks a free port) in a thread; returns once it listens."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listener's proto says TCP; with proto 0 every response waits out a delayed ACK (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    bound_port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        # log_config=None: uvicorn's loggers propagate to the daemon's logging setup.
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=5,
    )
    server = QuietServer(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"http-{host}:{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"HTTP server on {host}:{port} did not start")
        time.sleep(0.01)
    return ServerHandle(server, thread, app, host, bound_port)
