"""Sign-in once per browser session: a signed, HttpOnly, SameSite=Strict cookie.

Signing in with the API token gives a ``write`` session (the dashboard's
freeze, unfreeze, cancel and retry then need no token); the read token
(``[http] read_token_env``) gives a ``read`` session. The cookie holds
``v1.ROLE.EXPIRES.NONCE.MAC``, the MAC keyed by a digest of that role's
token, so any replica with the same tokens accepts it and rotating a token
ends every session made with it. No server-side state.

Writes made with a session also need the ``X-CSRF-Token`` header, a second
MAC over the session's nonce that the pages carry in a ``<meta>`` tag: a
cross-site page can neither read it nor send a custom header without a CORS
preflight this server never grants. ``SameSite=Strict`` and the Origin check
in ``pipeline.http.guard`` are further layers.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

from pipeline.config.settings import HttpSettings

COOKIE = "afk_session"
CSRF_HEADER = "x-csrf-token"
SESSION_MAX_AGE_S = 12 * 3600
ROLES = ("write", "read")


@dataclass(frozen=True)
class Session:
    role: str  # write | read
    nonce: str
    csrf: str

    @property
    def can_write(self) -> bool:
        return self.role == "write"


def _token(http: HttpSettings, role: str) -> str | None:
    ref = http.api_token if role == "write" else http.read_token
    return ref.resolve()


def _key(token: str) -> bytes:
    return hashlib.sha256(b"afk-pipeline session\0" + token.encode()).digest()


def _mac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def role_of_token(http: HttpSettings, given: str) -> str | None:
    """``write`` for the API token, ``read`` for the read token, else None (constant time)."""
    found = None
    for role in ROLES:
        expected = _token(http, role)
        if expected and hmac.compare_digest(given.encode(), expected.encode()) and found is None:
            found = role
    return found


def issue_cookie(http: HttpSettings, role: str, now: float | None = None) -> str:
    """A new cookie value for ``role`` (whose token must be configured)."""
    token = _token(http, role)
    assert token, f"no {role} token configured"
    expires = int((now or time.time()) + SESSION_MAX_AGE_S)
    body = f"v1.{role}.{expires}.{secrets.token_hex(16)}"
    return f"{body}.{_mac(_key(token), body)}"


def read_session(
    http: HttpSettings, cookie: str | None, now: float | None = None
) -> Session | None:
    """The session a cookie value proves, or None when absent, forged, stale or revoked."""
    parts = (cookie or "").split(".")
    if len(parts) != 5 or parts[0] != "v1" or parts[1] not in ROLES or not parts[2].isdigit():
        return None
    token = _token(http, parts[1])
    if not token:
        return None
    key = _key(token)
    body = ".".join(parts[:4])
    if not hmac.compare_digest(_mac(key, body).encode(), parts[4].encode()):  # any bytes sent
        return None
    if int(parts[2]) < (now or time.time()):
        return None
    return Session(parts[1], parts[3], _mac(key, "csrf." + parts[3])[:32])


def request_session(request: Request) -> Session | None:
    http: HttpSettings = request.app.state.ctx.settings.http
    return read_session(http, request.cookies.get(COOKIE))


def csrf_ok(request: Request, session: Session) -> bool:
    given = request.headers.get(CSRF_HEADER, "")
    return hmac.compare_digest(given.encode(), session.csrf.encode())


def cookie_header(http: HttpSettings, value: str, *, clear: bool = False) -> str:
    """The ``Set-Cookie`` value: a browser-session cookie, HttpOnly, SameSite=Strict."""
    parts = [f"{COOKIE}={'' if clear else value}", "Path=/", "HttpOnly", "SameSite=Strict"]
    if http.public_url and urlsplit(http.public_url).scheme == "https":
        parts.append("Secure")
    if clear:
        parts.append("Max-Age=0")
    return "; ".join(parts)


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a local path only (never ``//host`` or a URL)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if any(ord(c) < 32 for c in value):
        return "/"
    return value
