"""What the fake forges share: serving on loopback, routing, ETags, rate limits, faults.

A fake is a Starlette app with one catch-all route. Each request is logged,
checked against injected faults, authenticated, routed to a handler (a plain
function under the state lock), and then given an ETag (GETs; a matching
``If-None-Match`` gets 304 and costs no rate-limit point) and the forge's
rate-limit headers. ``serve_app`` runs any ASGI app under uvicorn in a thread
on 127.0.0.1 with an ephemeral port.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypedDict, Unpack
from urllib.parse import parse_qsl, unquote, urlencode

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pipeline.testing.forges.model import ForgeState
from pipeline.trackers.webhooks import sign_gitea, sign_github

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@dataclass
class ServedApp:
    """A running loopback server; ``stop()`` shuts it down and joins its thread."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> ServedApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_app(app: Any, *, host: str = "127.0.0.1", start_timeout_s: float = 10.0) -> ServedApp:
    """Serve an ASGI app on ``host`` and an ephemeral port; returns once it accepts."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listener's proto says TCP; with proto 0 every response waits out a delayed ACK (40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", ws="none", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError(f"loopback server on {host}:{port} did not start")
        time.sleep(0.01)
    return ServedApp(f"http://{host}:{port}", server, thread)


@dataclass
class Fault:
    """An injected failure: the next ``times`` requests matching ``pattern`` meet it.

    ``status=None`` with ``delay_s`` delays the real answer (a slow server);
    a status returns ``body`` (raw text, e.g. truncated JSON) with ``headers``.
    """

    pattern: re.Pattern[str]
    status: int | None
    headers: dict[str, str]
    body: str
    delay_s: float
    times: int
    method: str | None


class FaultSpec(TypedDict, total=False):
    """What ``FakeForge.inject`` takes: the status (500 by default; None with ``delay_s`` only
    delays), headers and raw body of the answer, how many requests meet it (1), which method."""

    status: int | None
    headers: Mapping[str, str] | None
    body: str | None
    delay_s: float
    times: int
    method: str | None


@dataclass
class RecordedRequest:
    method: str
    path: str  # without the API prefix, percent-decoded
    query: dict[str, str]
    status: int = 0
    authorized: bool = False
    headers: dict[str, str] = field(default_factory=dict)  # without credentials
    at: float = field(default_factory=time.monotonic)  # when the request arrived


@dataclass
class Reply:
    status: int = 200
    data: Any = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request, "re.Match[str]", Any], Reply]
_SECRET_HEADERS = ("authorization", "private-token", "cookie")


class FakeForge(ForgeState):
    """Base of the fake GitHub, Gitea and GitLab; subclasses add routes and shapes."""

    forge = "fake"
    api_prefix = ""

    def __init__(self, *, token: str = "test-token", rate_limit: int = 5000, bot: str = "afk-bot"):
        super().__init__(bot=bot)
        self.token = token
        self.rate_limit = rate_limit
        self.rate_remaining = rate_limit
        self.rate_reset = int(time.time()) + 3600
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self.served: ServedApp | None = None
        self._on_stop: list[Callable[[], None]] = []
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.app = Starlette(routes=[Route("/{path:path}", self._endpoint, methods=METHODS)])

    # -- test-facing -------------------------------------------------------

    @property
    def rate_used(self) -> int:
        """Rate-limit points spent so far (304 answers spend none)."""
        return self.rate_limit - self.rate_remaining

    @property
    def url(self) -> str:
        """The served base URL (site root; clients add the API prefix where they do)."""
        if self.served is None:
            raise RuntimeError("fake forge is not served; call serve() first")
        return self.served.url

    def serve(self) -> ServedApp:
        self.served = serve_app(self.app)
        return self.served

    def stop(self) -> None:
        """Stop serving and run the ``on_stop`` callbacks (closing clients)."""
        while self._on_stop:
            self._on_stop.pop()()
        if self.served is not None:
            self.served.stop()
            self.served = None

    def on_stop(self, callback: Callable[[], None]) -> None:
        self._on_stop.append(callback)

    def __enter__(self) -> Self:
        self.serve()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject(self, path_regex: str, **spec: Unpack[FaultSpec]) -> None:
        """Make the next ``times`` matching requests fail (``re.search`` on the path)."""
        status = spec.get("status", 500)
        body = spec.get("body")
        default = json.dumps({"message": f"injected {status}"}) if status else ""
        fault = Fault(
            re.compile(path_regex),
            status,
            dict(spec.get("headers") or {}),
            default if body is None else body,
            spec.get("delay_s", 0.0),
            spec.get("times", 1),
            spec.get("method"),
        )
        with self.lock:
            self.faults.append(fault)

    def paths(self, method: str | None = None) -> list[str]:
        with self.lock:
            return [r.path for r in self.requests if method is None or r.method == method]

    # -- for subclasses ----------------------------------------------------

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self._routes.append((method, re.compile(f"^{pattern}$"), handler))

    def authorized(self, request: Request) -> bool:
        raise NotImplementedError

    def api_path(self, path: str) -> str | None:
        """The path under the API prefix that routes match, or ``None`` (404) outside it."""
        if not path.startswith(self.api_prefix):
            return None
        return path[len(self.api_prefix) :] or "/"

    def rate_headers(self) -> dict[str, str]:
        return {}

    def rate_exhausted(self) -> Response:
        return json_response(429, {"message": "rate limit exceeded"}, {})

    # -- dispatch ----------------------------------------------------------

    async def _endpoint(self, request: Request) -> Response:
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        local = self.api_path(raw_path.decode("latin-1").split("?", 1)[0])
        if local is None:
            return json_response(404, {"message": "Not Found"}, {})
        path = local
        record = RecordedRequest(
            request.method,
            unquote(path),
            dict(parse_qsl(request.url.query)),
            headers={k: v for k, v in request.headers.items() if k not in _SECRET_HEADERS},
        )
        body = await request.body()  # read first: a slow answer still does the work
        with self.lock:
            self.requests.append(record)
            fault = self._take_fault(request.method, unquote(path))
        if fault is not None and fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault is not None and fault.status is not None:
            record.status = fault.status
            return Response(fault.body, fault.status, fault.headers, "application/json")
        response = self._answer(request, path, body, record)
        record.status = response.status_code
        return response

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.times > 0 and fault.pattern.search(path):
                if fault.method is None or fault.method == method:
                    fault.times -= 1
                    return fault
        return None

    def _answer(
        self, request: Request, path: str, body: bytes, record: RecordedRequest
    ) -> Response:
        record.authorized = self.authorized(request)
        if not record.authorized:
            return json_response(401, {"message": "Bad credentials"}, self.rate_headers())
        with self.lock:
            if self.rate_remaining <= 0:
                return self.rate_exhausted()
            reply = self._dispatch(request, path, body)
            if request.method == "GET" and reply.status == 200:
                etag = 'W/"' + hashlib.sha1(_dump(reply.data)).hexdigest() + '"'
                reply.headers["ETag"] = etag
                if request.headers.get("if-none-match") == etag:
                    return Response(None, 304, {**reply.headers, **self.rate_headers()})
            self.rate_remaining -= 1
            return json_response(reply.status, reply.data, {**reply.headers, **self.rate_headers()})

    def _dispatch(self, request: Request, path: str, body: bytes) -> Reply:
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            return Reply(400, {"message": "Problems parsing JSON"})
        for method, pattern, handler in self._routes:
            match = pattern.match(path)
            if match and method == request.method:
                try:
                    return handler(request, match, payload)
                except KeyError:
                    return Reply(404, {"message": "Not Found"})
        return Reply(404, {"message": "Not Found"})


def _dump(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def json_response(status: int, data: Any, headers: Mapping[str, str]) -> Response:
    content = None if status in (204, 304) else _dump(data)
    return Response(content, status, dict(headers), "application/json")


def page_bounds(request: Request, size_param: str, default: int, cap: int) -> tuple[int, int]:
    """``(page, size)`` from the query, with the forge's default and cap."""
    try:
        page = max(1, int(request.query_params.get("page", "1")))
        size = int(request.query_params.get(size_param, str(default)))
    except ValueError:
        page, size = 1, default
    return page, max(1, min(size, cap))


def send_webhook(
    target_url: str,
    event: str,
    payload: Mapping[str, Any],
    secret: str,
    *,
    kind: str = "github",
    delivery_id: str | None = None,
) -> httpx.Response:
    """POST ``payload`` to ``target_url`` signed and headed exactly as ``kind`` does."""
    body = json.dumps(payload).encode()
    delivery = delivery_id or str(uuid.uuid4())
    headers = {"Content-Type": "application/json"}
    headers.update(webhook_headers(kind, event, delivery, secret, body))
    return httpx.post(target_url, content=body, headers=headers, timeout=5.0)


def send_github_form_webhook(
    target_url: str, event: str, payload: Mapping[str, Any], secret: str
) -> httpx.Response:
    """POST ``payload`` as a GitHub webhook set to ``application/x-www-form-urlencoded`` does:
    the JSON in a form field named ``payload``, the signature over the whole body as sent."""
    body = urlencode({"payload": json.dumps(payload)}).encode("ascii")
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    headers.update(webhook_headers("github", event, str(uuid.uuid4()), secret, body))
    return httpx.post(target_url, content=body, headers=headers, timeout=5.0)


def webhook_headers(
    kind: str, event: str, delivery: str, secret: str, body: bytes
) -> dict[str, str]:
    """The event, delivery and signature headers ``kind`` sends with a webhook ``body``."""
    if kind == "github":
        return {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign_github(secret.encode(), body),
        }
    if kind in ("gitea", "forgejo"):
        signature = sign_gitea(secret.encode(), body)
        return {
            "X-Gitea-Event": event,
            "X-Gitea-Delivery": delivery,
            "X-Gitea-Signature": signature,
            "X-Forgejo-Event": event,
            "X-Forgejo-Delivery": delivery,
            "X-Forgejo-Signature": signature,
        }
    if kind == "gitlab":
        return {
            "X-Gitlab-Event": event,
            "X-Gitlab-Token": secret,
            "X-Gitlab-Event-UUID": delivery,
            "Idempotency-Key": delivery,
        }
    raise ValueError(f"send_webhook: unknown forge kind {kind!r}")
