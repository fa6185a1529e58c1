"""The sandbox's way out: an HTTP proxy on a Unix socket that enforces the allowlist.

In ``allowlist`` mode a sandbox has its own network namespace with nothing in
it but loopback, so no packet leaves it directly. Its only way out is a Unix
socket bound into it, served by this proxy in the daemon: ``CONNECT host:port``
(HTTPS) and absolute-form HTTP requests are relayed when the host and port are on
the run's allowlist and refused with a 403 that says why otherwise (an entry
without a port allows 443 and 80 only, one with a port that port); a relayed HTTP
request carries the checked host as its ``Host``, never the client's own. The
decision is made here, outside the sandbox, so nothing the agent does inside can
widen it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 15.0
IDLE_TIMEOUT_S = 600.0
# Per sandboxed command: connections served at once (each holds a daemon thread), and
# refusals told to the run's timeline (each a row). An agent looping on connects gets
# the rest refused all the same, unrecorded.
MAX_CONNECTIONS = 256
MAX_DENIAL_EVENTS = 20
_CHUNK = 65536
# The ports an allowlist entry without one opens: HTTPS and HTTP. A registry's name must
# not open the rest of its machine (ssh, a database, the daemon's own API).
DEFAULT_PORTS = (443, 80)


@dataclass(frozen=True)
class NetworkPolicy:
    """``open`` shares the host's network; ``allowlist`` reaches ``allow_hosts`` only."""

    mode: str = "allowlist"
    allow_hosts: tuple[str, ...] = ()

    def allows(self, host: str, port: int) -> bool:
        """True when ``host:port`` matches an entry: ``host:port`` that port, ``host`` and
        ``*.domain`` the ``DEFAULT_PORTS``."""
        if self.mode == "open":
            return True
        host = host.lower().strip("[]")
        return any(_matches(entry.lower(), host, port) for entry in self.allow_hosts)

    def refusal(self, host: str, port: int) -> str:
        """Why ``host:port`` is refused, and the ``allow_hosts`` entry that would allow it."""
        host = host.lower().strip("[]")
        wanted = entry_for(host, port)
        hint = f'the operator can allow it with "{wanted}" in allow_hosts'
        if not any(_named(_split_entry(entry.lower())[0], host) for entry in self.allow_hosts):
            return f"{wanted} is not on the sandbox's network allowlist; {hint}"
        return (
            f"port {port} of {host} is not allowed: an allowlist entry without a port "
            f"allows only ports {' and '.join(map(str, DEFAULT_PORTS))}; {hint}"
        )

    def describe(self) -> str:
        if self.mode == "open":
            return "open (the host's network)"
        return "allowlist: " + (", ".join(self.allow_hosts) or "nothing")


def entry_for(host: str, port: int) -> str:
    """The allowlist entry for exactly ``host:port`` (``[v6]:port`` for an IPv6 address)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _matches(entry: str, host: str, port: int) -> bool:
    name, wanted_port = _split_entry(entry)
    if port not in (DEFAULT_PORTS if wanted_port is None else (wanted_port,)):
        return False
    return _named(name, host)


def _named(name: str, host: str) -> bool:
    if name.startswith("*."):
        return host.endswith(name[1:])
    return host == name


def _split_entry(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") else None
    name, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name, int(port)
    return entry, None


@dataclass(frozen=True)
class Request:
    """The first line of a proxied request: where it wants to go."""

    method: str
    host: str
    port: int
    head: bytes  # the request head to send upstream (absolute form rewritten)
    rest: bytes  # bytes that followed the head

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"


class BadRequest(ValueError):
    """Not an HTTP proxy request this proxy understands."""


def parse_request(data: bytes) -> Request:
    """Parse a proxy request head: ``CONNECT h:p`` or ``METHOD http://h[:p]/path``."""
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        method, target, version = lines[0].decode("latin-1").split(" ")
    except ValueError as exc:
        raise BadRequest(f"malformed request line {lines[0][:200]!r}") from exc
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise BadRequest(f"CONNECT needs host:port, got {target[:200]!r}")
        return Request(method, host.strip("[]"), int(port), b"", rest)
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise BadRequest(f"expected an absolute http:// URL, got {target[:200]!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = [line for line in lines[1:] if not _dropped(line)]
    first = f"{method} {path} {version}".encode("latin-1")
    # The host the policy checked, also by name: a virtual-hosting upstream (a CDN in
    # front of a registry) routes by Host, and the agent's own would pick another site.
    named = f"Host: {parts.netloc.rpartition('@')[2]}".encode("latin-1")
    upstream = b"\r\n".join([first, named, *kept, b"Connection: close"]) + b"\r\n\r\n"
    return Request(method, parts.hostname, parts.port or 80, upstream, rest)


def _dropped(line: bytes) -> bool:
    """A header the proxy does not pass on: hop-by-hop ones and the client's ``Host``."""
    name = line.split(b":", 1)[0].strip().lower()
    return name.startswith(b"proxy-") or name in (b"connection", b"keep-alive", b"host")


def _read_head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(_CHUNK)
        if not chunk:
            raise BadRequest("the connection closed before a full request head")
        data += chunk
        if len(data) > MAX_HEAD_BYTES:
            raise BadRequest("request head too large")
    return data


def relay(left: socket.socket, right: socket.socket, idle_s: float = IDLE_TIMEOUT_S) -> None:
    """Copy bytes both ways until either side closes or nothing moves for ``idle_s``."""
    sockets = [left, right]
    while True:
        readable, _, _ = select.select(sockets, [], [], idle_s)
        if not readable:
            return
        for source in readable:
            data = source.recv(_CHUNK)
            if not data:
                return
            (right if source is left else left).sendall(data)


Denied = Callable[[str, str], None]  # (target, reason)


class EgressProxy:
    """One listening Unix socket serving one sandboxed command under one policy."""

    def __init__(self, policy: NetworkPolicy, on_denied: Denied | None = None) -> None:
        self.policy = policy
        self.on_denied = on_denied
        self.allowed = 0  # connections let through, and refused (counts: a loop is unbounded)
        self.denied = 0
        self._dir = Path(tempfile.mkdtemp(prefix="afk-egress-"))
        os.chmod(self._dir, 0o700)
        self.path = self._dir / "proxy.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(64)
        self._closed = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread = threading.Thread(target=self._serve, name="egress-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self.path.unlink()
            self._dir.rmdir()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                conn.close()  # as many in flight as one command may hold: no thread for it
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            self._serve_one(conn)
        finally:
            self._slots.release()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = parse_request(_read_head(conn))
            except (BadRequest, OSError) as exc:
                _answer(conn, 400, f"afk-pipeline sandbox proxy: {exc}")
                return
            if not self.policy.allows(request.host, request.port):
                self._deny(conn, request)
                return
            self.allowed += 1
            self._forward(conn, request)

    def _deny(self, conn: socket.socket, request: Request) -> None:
        reason = self.policy.refusal(request.host, request.port)
        answer = f"afk-pipeline sandbox: {reason} ({self.policy.describe()})"
        self.denied += 1
        if self.on_denied is not None and self.denied <= MAX_DENIAL_EVENTS:
            if self.denied == MAX_DENIAL_EVENTS:
                reason += "; later refusals of this command are not recorded"
            self.on_denied(request.target, reason)
        _answer(conn, 403, answer)

    def _forward(self, conn: socket.socket, request: Request) -> None:
        try:
            upstream = socket.create_connection((request.host, request.port), CONNECT_TIMEOUT_S)
        except OSError as exc:
            _answer(conn, 502, f"afk-pipeline sandbox proxy: cannot reach {request.target}: {exc}")
            return
        with upstream:
            upstream.settimeout(None)
            if request.method == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(request.head)
            if request.rest:
                upstream.sendall(request.rest)
            with contextlib.suppress(OSError):
                relay(conn, upstream)


def _answer(conn: socket.socket, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        conn.sendall(head + body)


@contextlib.contextmanager
def egress(policy: NetworkPolicy, on_denied: Denied | None = None) -> Iterator[EgressProxy]:
    """A proxy for the duration of one sandboxed command."""
    proxy = EgressProxy(policy, on_denied)
    try:
        yield proxy
    finally:
        proxy.close()
