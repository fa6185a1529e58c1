"""A lean HTTP/1.1 transport for the forge clients: ``http.client`` under ``httpx``.

A poll cycle is one small conditional GET per repo, answered 304 when nothing
changed, so its cost is the client's own CPU per request. ``httpx``'s default
transport (``httpcore`` over ``h11``, in pure Python, behind a pool lock every
request takes) spends about three times what ``http.client`` spends on the same
request; this transport keeps ``httpx`` above it (the request and response
types, redirects, content decoding, the failure policy in ``ForgeHttp``) and
sends with ``http.client``.

Connections are kept alive in a small pool per origin: a request takes an idle
one or opens a new one, and gives it back when the answer is read in full. An
idle connection the server closed is noticed before reuse (its socket reads as
ready) and replaced; an idempotent request that still meets a connection closed
under it is sent once more on a fresh one, a write never is.

It speaks plain HTTP/1.1 and TLS with ``httpx``'s trust settings. Proxies are
``httpx``'s business: ``lean_transport`` gives ``None`` (``httpx``'s own
transport) when the environment names a proxy.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Answer:
    """A forge's answer as sent: status, headers, body (still content-encoded)."""

    status: int
    headers: list[tuple[str, str]]
    content: bytes

    def response(self, request: httpx.Request) -> httpx.Response:
        """The answer as an ``httpx`` response to ``request`` (content decoding applies)."""
        return httpx.Response(
            self.status, headers=self.headers, content=self.content, request=request
        )


IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_IDLE_PER_ORIGIN = 16
Origin = tuple[str, str, int]


class LeanTransport(httpx.BaseTransport):
    """``httpx`` transport over pooled ``http.client`` connections (see the module doc)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.exchange(
            request.method,
            request.url,
            request.headers.raw,
            request.read() or None,
            _read_timeout(request),
        )
        return answer.response(request)

    def exchange(
        self,
        method: str,
        url: httpx.URL,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes | None,
        timeout: float | None,
    ) -> Answer:
        """Send one request (``headers`` complete, ``Host`` included) and read its answer.

        Failures raise ``httpx`` errors, as ``httpx``'s own transport would.
        """
        origin = _origin(url)
        target = url.raw_path.decode("ascii")
        for attempt in (1, 2):  # the second time on a new connection
            with self._connection(origin, timeout, fresh=attempt == 2) as (conn, reused):
                try:
                    return _exchange(conn, (method, target, headers, body))
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    conn.close()
                    if not (reused and attempt == 1 and method in IDEMPOTENT):
                        raise httpx.RemoteProtocolError(
                            "the server closed the connection"
                        ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [conn for conns in self._idle.values() for conn in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()

    @contextmanager
    def _connection(
        self, origin: Origin, timeout: float | None, *, fresh: bool
    ) -> Iterator[tuple[http.client.HTTPConnection, bool]]:
        conn, reused = (None if fresh else self._take(origin)), True
        if conn is None:
            conn, reused = self._open(origin, timeout), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            yield conn, reused
        except BaseException:
            conn.close()
            raise
        self._give_back(origin, conn)

    def _take(self, origin: Origin) -> http.client.HTTPConnection | None:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                conn = idle.pop() if idle else None
            if conn is None or _usable(conn):
                return conn
            conn.close()

    def _give_back(self, origin: Origin, conn: http.client.HTTPConnection) -> None:
        if conn.sock is None:  # the answer said ``Connection: close``
            return
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if not self._closed and len(idle) < MAX_IDLE_PER_ORIGIN:
                idle.append(conn)
                return
        conn.close()

    def _open(self, origin: Origin, timeout: float | None) -> http.client.HTTPConnection:
        scheme, host, port = origin
        if scheme == "https":
            if self._ssl_context is None:
                self._ssl_context = httpx.create_ssl_context()
            return http.client.HTTPSConnection(
                host, port, timeout=timeout, context=self._ssl_context
            )
        return http.client.HTTPConnection(host, port, timeout=timeout)


def lean_transport() -> LeanTransport | None:
    """The lean transport, or ``None`` (``httpx``'s own) when the environment names a proxy."""
    proxies = {k: v for k, v in urllib.request.getproxies().items() if k != "no"}
    return None if proxies else LeanTransport()


def _exchange(
    conn: http.client.HTTPConnection,
    request: tuple[str, str, Sequence[tuple[bytes, bytes]], bytes | None],
) -> Answer:
    method, target, headers, body = request
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for key, value in headers:  # httpx's, Host included, repeats kept
            conn.putheader(key, value)
        conn.endheaders(body)
        answer = conn.getresponse()
        content = answer.read()
    except TimeoutError:
        raise httpx.ReadTimeout("no answer in time") from None
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        raise
    except (OSError, http.client.HTTPException) as exc:
        raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from None
    # The body is read whole and de-chunked: its transfer coding is no longer true of it.
    kept = [pair for pair in answer.getheaders() if pair[0].lower() != "transfer-encoding"]
    return Answer(answer.status, kept, content)


def _usable(conn: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection is usable while its socket has nothing to read.

    A readable idle socket means the server closed it (or sent what nobody asked for).
    """
    sock = conn.sock
    if not isinstance(sock, socket.socket):
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _origin(url: httpx.URL) -> Origin:
    scheme = url.scheme
    if scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r}")
    return scheme, url.host, url.port or (443 if scheme == "https" else 80)


def _read_timeout(request: httpx.Request) -> float | None:
    timeouts = request.extensions.get("timeout", {})
    value = timeouts.get("read") if isinstance(timeouts, dict) else None
    return float(value) if isinstance(value, int | float) else None
