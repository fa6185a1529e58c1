"""What one sandboxed command may cost the daemon through its egress proxy: bounded.

The proxy's socket is inside the sandbox, so an agent can open connections to it
directly, as many as it likes, and loop on refused hosts. Each connection used to hold
a daemon thread for as long as it stayed open, and each refusal was a timeline row.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from pipeline.sandbox.network import (
    MAX_CONNECTIONS,
    MAX_DENIAL_EVENTS,
    NetworkPolicy,
    egress,
)

SILENT = 4 * MAX_CONNECTIONS
DENIED_REQUEST = b"GET http://203.0.113.9:9/ HTTP/1.1\r\nHost: 203.0.113.9:9\r\n\r\n"


def _connect(path: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    return conn


def _ask(path: str, request: bytes) -> bytes:
    """Send ``request`` on a new connection; everything the proxy answers until it closes."""
    with _connect(path) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


def test_silent_connections_hold_at_most_the_cap_of_daemon_threads() -> None:
    """Four times the cap of connections that never send a request: at most the cap of
    them holds a daemon thread; the others are closed at once. One thread each, before."""
    baseline = threading.active_count()
    with egress(NetworkPolicy("allowlist", ())) as proxy:
        silent = [_connect(str(proxy.path)) for _ in range(SILENT)]
        try:
            # The proxy accepts in order: once this one is answered (or closed, no slot
            # left), every silent connection before it was taken or closed.
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                _ask(str(proxy.path), DENIED_REQUEST)
            held = threading.active_count() - baseline - 1  # the proxy's own accept thread
        finally:
            for conn in silent:
                conn.close()
    assert held <= MAX_CONNECTIONS, held


def test_refusals_reach_the_timeline_up_to_the_cap_and_are_refused_all_the_same() -> None:
    """Three times the cap of refused requests: each answered 403, the first ones told to
    the timeline, the last of them saying later ones are not recorded."""
    told: list[str] = []
    with egress(NetworkPolicy("allowlist", ()), lambda target, why: told.append(why)) as proxy:
        answers = [_ask(str(proxy.path), DENIED_REQUEST) for _ in range(3 * MAX_DENIAL_EVENTS)]
    assert all(answer.startswith(b"HTTP/1.1 403") for answer in answers)
    assert len(told) == MAX_DENIAL_EVENTS
    assert told[-1].endswith("later refusals of this command are not recorded")
