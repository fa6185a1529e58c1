"""The front door: which Host is served, which origin may write, who may read.

* **Host allowlist** (DNS rebinding): a request whose ``Host`` is not an IP
  literal, ``localhost``, the host of ``[http] public_url`` or one of
  ``[http] allowed_hosts`` is answered 421 before any handler runs. A page on
  ``evil.example`` that rebinds its name to 127.0.0.1 still sends
  ``Host: evil.example``, so it can read nothing.
* **Cross-site writes**: a non-GET request whose ``Origin`` is not this
  server's own (the ``Host`` it was sent to, or ``public_url``), or that the
  browser marks ``Sec-Fetch-Site: cross-site``, is refused with 403.
* **Reads**: once ``[http] read_token_env``/``read_token_file`` is set, the
  API, the dashboard and the live events need a signed-in session or a bearer
  token (the read token or the API token); without one an API path answers 401
  JSON and a page answers 401 with the sign-in form. Health, metrics, the
  OpenAPI document, static files, sign-in and webhooks (signed) stay open.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pipeline.config.settings import HttpSettings
from pipeline.http.session import request_session, role_of_token

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/health", "/health/live", "/health/ready", "/metrics", "/openapi.json"})
OPEN_PREFIXES = ("/static/", "/login", "/logout", "/webhooks/")
JSON_PREFIXES = ("/api", "/fragments/", "/openapi.json")


def host_name(value: str) -> str:
    """The host of a ``Host`` header or URL netloc, lower-case, without port or brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_allowed(http: HttpSettings, host: str) -> bool:
    """Whether a request sent to ``host`` (a ``Host`` header) is served."""
    name = host_name(host)
    if not name or is_ip_literal(name) or name == "localhost":
        return True
    if http.public_url and name == host_name(urlsplit(http.public_url).netloc):
        return True
    return name in http.allowed_hosts


def origin_allowed(http: HttpSettings, origin: str, host: str) -> bool:
    """Whether ``Origin`` is this server itself (as addressed, or its public URL)."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    own = {host.strip().lower()}
    if http.public_url:
        own.add(urlsplit(http.public_url).netloc.lower())
    return parts.netloc.lower() in own


def bearer(request: Request) -> str | None:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" and given.strip() else None


def may_read(request: Request, http: HttpSettings) -> bool:
    """Reads are open until a read token is configured; then a session or a token."""
    if not http.read_token.configured:
        return True
    path = request.url.path
    if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
        return True
    given = bearer(request)
    if given is not None:
        return role_of_token(http, given) is not None
    return request_session(request) is not None


def refusal(request: Request, http: HttpSettings) -> Response | None:
    """The answer for a request the front door refuses, or None to serve it."""
    host = request.headers.get("host", "")
    if not host_allowed(http, host):
        return JSONResponse(
            {
                "error": f"this server does not answer for host {host_name(host)!r}; "
                "add it to [http] allowed_hosts or set [http] public_url"
            },
            status_code=421,
        )
    if request.method not in SAFE_METHODS:
        origin = request.headers.get("origin")
        cross = request.headers.get("sec-fetch-site") == "cross-site"
        if cross or (origin is not None and not origin_allowed(http, origin, host)):
            return JSONResponse(
                {"error": "cross-site request refused: writes must come from this server's pages"},
                status_code=403,
            )
    if not may_read(request, http):
        return unauthorised(request)
    return None


def unauthorised(request: Request) -> Response:
    path = request.url.path
    if path.startswith(JSON_PREFIXES) or "text/html" not in request.headers.get("accept", ""):
        return JSONResponse(
            {"error": "sign in at /login, or send 'Authorization: Bearer <read or API token>'"},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="pipeline"'},
        )
    from pipeline.http.dashboard import render

    return render("login.html", 401, next=path, message="Sign in to see this page.")


class GuardMiddleware:
    """Applies ``refusal`` to every HTTP request before routing."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            http: HttpSettings = scope["app"].state.ctx.settings.http
            refused = refusal(request, http)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)
