"""A loopback HTTP server that records what it is sent and serves canned answers.

Stands in for a notification endpoint (apprise ``json://127.0.0.1:<port>/path``)
or a small JSON API (a CI server) in tests. It binds 127.0.0.1 on a free port.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True)
class Received:
    method: str
    path: str  # with the query string
    headers: dict[str, str]
    body: bytes
    header_lines: tuple[tuple[str, str], ...] = ()  # every line as sent, repeats too

    def json(self) -> object:
        return json.loads(self.body.decode("utf-8"))


@dataclass
class Route:
    status: int = 200
    body: bytes = b"{}"
    content_type: str = "application/json"


@dataclass
class _State:
    received: list[Received] = field(default_factory=list)
    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    default_status: int = 200
    changed: threading.Condition = field(default_factory=threading.Condition)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        state = self.server.state
        with state.changed:
            state.received.append(
                Received(
                    self.command,
                    self.path,
                    dict(self.headers.items()),
                    body,
                    tuple(self.headers.items()),
                )
            )
            state.changed.notify_all()
        path = self.path.split("?", 1)[0]
        route = state.routes.get((self.command, path)) or Route(status=state.default_status)
        self.send_response(route.status)
        self.send_header("Content-Type", route.content_type)
        self.send_header("Content-Length", str(len(route.body)))
        self.end_headers()
        self.wfile.write(route.body)

    do_GET = do_POST = do_PUT = _handle

    def log_message(self, format: str, *args: object) -> None:
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    allow_reuse_address = True

    def __init__(self, state: _State, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.state = state


class Receiver:
    """Records every request; ``route()`` sets an answer, ``default_status`` the rest.

    ``port`` 0 takes a free port; a given one brings a receiver back where it was.
    """

    def __init__(self, default_status: int = 200, port: int = 0) -> None:
        self._state = _State(default_status=default_status)
        self._server = _Server(self._state, port)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def received(self) -> list[Received]:
        with self._state.changed:
            return list(self._state.received)

    def set_default_status(self, status: int) -> None:
        self._state.default_status = status

    def route(self, method: str, path: str, body: object, status: int = 200) -> None:
        """Answer ``method path`` with ``body`` (JSON-encoded unless bytes)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        self._state.routes[(method.upper(), path)] = Route(status=status, body=raw)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Received]:
        """Block until at least ``count`` requests arrived (or the timeout); all of them."""
        with self._state.changed:
            self._state.changed.wait_for(lambda: len(self._state.received) >= count, timeout_s)
            return list(self._state.received)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
