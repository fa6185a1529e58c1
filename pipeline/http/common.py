"""What every HTTP handler shares: the app context, JSON shapes, input checks, auth.

Handlers never trust input: every query parameter, path segment and body
field is checked here and a bad one becomes a 422 naming the field, so no
malformed request reaches the store (where it could become a 500).
"""

from __future__ import annotations

import hmac
import json
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse

from pipeline.config.settings import Settings
from pipeline.core.states import WAITING_STATES
from pipeline.core.when import BadTime, parse_when
from pipeline.http.metrics import Metrics
from pipeline.http.session import Session, csrf_ok, request_session
from pipeline.http.shapes import EventJson, RepoJson, RunJson, Timestamp
from pipeline.notify.escalation import frozen_wait
from pipeline.store import Repo, Run, RunEvent
from pipeline.store.roles import ApiStore

WebhookResult = tuple[int, Mapping[str, Any]]
WebhookHandler = Callable[[str, Mapping[str, str], bytes], WebhookResult | Awaitable[WebhookResult]]
HealthExtra = Callable[[], Mapping[str, Any]]

# Ids are 32-bit on PostgreSQL; anything larger cannot exist and must not reach SQL.
MAX_ID = 2**31 - 1
MAX_NAME = 200
MAX_NOTE = 2000
MAX_PAGE = 500
MAX_OFFSET = 10_000_000
MAX_BODY = 64 * 1024
PRIORITY_RANGE = (-1000, 1000)
INTEGER = re.compile(r"-?[0-9]{1,12}")
# Query parameters (``request.query_params`` or a filtered copy of them).
Query = Mapping[str, str]
NO_TOKEN_MESSAGE = (
    "write endpoints are disabled: no API token is configured; set [http] api_token_env "
    "(or api_token_file) in the config and put the token in that variable or file, "
    "then send it as 'Authorization: Bearer <token>'"
)


@dataclass
class ApiContext:
    """Everything a handler needs, held on ``app.state.ctx``."""

    store: ApiStore
    settings: Settings
    metrics: Metrics
    webhook_handler: WebhookHandler | None = None
    health_extra: HealthExtra | None = None
    sse_poll_s: float = 0.5
    sse_keepalive_s: float = 15.0
    max_streams: int = 100  # live event streams open at once (each polls the database)
    streams: int = 0  # open now; changed only on the event loop
    # Set when the server is stopping: live streams end within one poll.
    closing: threading.Event = field(default_factory=threading.Event)


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


class BadInput(Exception):
    """A request field that is missing or malformed: answered with 422."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    """The one error shape of the API: ``{"error": message, ...}``."""
    headers = extra.pop("headers", None)
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def bad_input_response(exc: BadInput) -> JSONResponse:
    return error(422, str(exc), field=exc.field)


class BodyTooLarge(Exception):
    """A request body over the configured limit (answered 413)."""


async def read_bounded(request: Request, limit: int) -> bytes:
    """The request body, refused (``BodyTooLarge``) as soon as it is known to exceed ``limit``.

    A declared ``Content-Length`` over the limit is refused before reading a
    byte; a chunked body is counted as it arrives and dropped at the limit, so
    memory never holds more than ``limit`` bytes whatever the client sends.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise BodyTooLarge
        body += chunk
    return bytes(body)


# JSON shapes ---------------------------------------------------------------


def iso(value: datetime | None) -> str | None:
    """A naive-UTC database time as ISO 8601 with ``Z``."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def _jsonable(value: Any) -> Any:
    return iso(value) if isinstance(value, datetime) else value


def frozen_note(store: ApiStore, run: Run) -> str | None:
    """What ``run`` waits for when it is queued in a frozen repo (an unfreeze), else None."""
    if run.state not in WAITING_STATES:
        return None
    found = store.get_repo(run.repo_name)
    return frozen_wait(run.repo_name) if found is not None and found.frozen else None


def run_json(run: Run) -> RunJson:
    data = {k: _jsonable(v) for k, v in asdict(run).items()}
    data["repo"] = data.pop("repo_name")
    data["duration_s"] = run.duration_s
    data["terminal"] = run.terminal
    return cast(RunJson, data)


def event_json(event: RunEvent) -> EventJson:
    return {
        "id": event.id,
        "run_id": event.run_id,
        "attempt": event.attempt,
        "ts": Timestamp(iso(event.ts) or ""),
        "kind": event.kind,
        "message": event.message,
        "data": event.data,
    }


def repo_json(repo: Repo, queued: int) -> RepoJson:
    data = {k: _jsonable(v) for k, v in asdict(repo).items()}
    data["frozen"] = repo.frozen
    data["queued"] = queued
    return cast(RepoJson, data)


# Input checks --------------------------------------------------------------


def check_int(name: str, value: object, low: int, high: int) -> int:
    """An integer in [low, high]; JSON booleans are not integers."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(name, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadInput(name, f"must be between {low} and {high}, got {value}")
    return value


def query_int(params: Query, name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    if not INTEGER.fullmatch(raw):
        raise BadInput(name, f"must be an integer, got {raw[:40]!r}")
    return check_int(name, int(raw), low, high)


def check_text(name: str, value: object, max_len: int, *, allow_newlines: bool = False) -> str:
    """A string of at most ``max_len`` characters with no control characters."""
    if not isinstance(value, str):
        raise BadInput(name, f"must be a string, got {type(value).__name__}")
    if len(value) > max_len:
        raise BadInput(name, f"must be at most {max_len} characters")
    allowed = "\n\t\r" if allow_newlines else ""
    if any((ord(c) < 32 or ord(c) == 127) and c not in allowed for c in value):
        raise BadInput(name, "must not contain control characters")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):  # JSON "\ud800" is not text
        raise BadInput(name, "must be valid Unicode text (no lone surrogates)")
    return value


def check_name(name: str, value: object) -> str:
    """A repo name: 1..200 printable characters."""
    text = check_text(name, value, MAX_NAME)
    if not text:
        raise BadInput(name, "must not be empty")
    return text


def query_name(params: Query, name: str) -> str | None:
    raw = params.get(name)
    return check_name(name, raw) if raw is not None else None


def query_choice(params: Query, name: str, choices: tuple[str, ...]) -> str | None:
    raw = params.get(name)
    if raw is None:
        return None
    if raw not in choices:
        raise BadInput(name, f"must be one of {', '.join(choices)}, got {raw[:40]!r}")
    return raw


def query_time(params: Query, name: str) -> datetime | None:
    """``since``/``until``: an ISO time, an age before now (``24h``, ``7d``) or ``today``."""
    raw = params.get(name)
    if raw is None:
        return None
    try:
        return parse_when(raw)
    except BadTime as exc:
        raise BadInput(name, str(exc)) from None


def query_text(params: Query, name: str) -> str | None:
    """A free-text search: up to 200 printable characters; blank means no search."""
    raw = params.get(name)
    if raw is None:
        return None
    return check_text(name, raw, MAX_NAME).strip() or None


def path_id(request: Request) -> int | None:
    """The ``{run_id}`` path parameter, or None when no run can have it."""
    value: int = request.path_params["run_id"]
    return value if 1 <= value <= MAX_ID else None


async def json_object(request: Request, allowed: frozenset[str]) -> dict[str, Any]:
    """The body as a JSON object with only ``allowed`` keys; an empty body is ``{}``."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadInput("body", f"must be at most {MAX_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        raise BadInput("body", "must be valid JSON") from None
    if not isinstance(body, dict):
        raise BadInput("body", f"must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadInput(unknown[0], f"unknown field; allowed: {', '.join(sorted(allowed))}")
    return body


# Auth ----------------------------------------------------------------------


def _session_refusal(request: Request, session: Session) -> JSONResponse | None:
    """None when a signed-in session may write; else why not, in words (still a 401)."""
    if not session.can_write:
        message = (
            "this session is signed in with the read-only token: sign in at /login "
            "with the API token to write"
        )
    elif not csrf_ok(request, session):
        message = (
            "the X-CSRF-Token header is missing or does not match this session: "
            "reload the page and try again"
        )
    else:
        return None
    return error(401, message, headers={"WWW-Authenticate": 'Bearer realm="pipeline"'})


def check_token(request: Request) -> JSONResponse | None:
    """None when the request may write, else the refusal.

    A write carries the API token as ``Authorization: Bearer <token>``, or comes
    from a signed-in ``write`` session with its ``X-CSRF-Token`` header.
    """
    http = context(request).settings.http
    expected = http.api_token.resolve()
    if not expected:
        return error(403, NO_TOKEN_MESSAGE)
    header = request.headers.get("authorization", "")
    if not header:
        session = request_session(request)
        if session is not None:
            return _session_refusal(request, session)
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), expected.encode()
    ):
        return error(
            401,
            "missing or wrong API token: send 'Authorization: Bearer <token>', "
            "or sign in at /login with the API token",
            headers={"WWW-Authenticate": 'Bearer realm="pipeline"'},
        )
    return None
