"""Where an allowed plain-HTTP request goes: to the host the proxy checked, by name too.

The proxy decides on the host of an absolute-form request's URL. The request's own
``Host`` header is what a virtual-hosting upstream (a CDN in front of a registry)
routes by: one the agent chose would carry the request to another site served there,
past the allowlist. RFC 9112 (3.2.2): a proxy replaces it with the URL's authority.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from pipeline.sandbox.network import NetworkPolicy, egress


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[list[str]]] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get_all("Host") or [])
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[tuple[ThreadingHTTPServer, list[list[str]]]]:
    seen: ClassVar[list[list[str]]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server, seen
    finally:
        server.shutdown()
        server.server_close()


def _ask(path: str, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


@pytest.mark.parametrize(
    "headers",
    [
        b"Host: attacker.example\r\n",
        b"host: attacker.example\r\nHost: attacker.example\r\n",
        b"Host:\tattacker.example\r\n",
        b"",
    ],
    ids=["other-host", "two-hosts", "tab", "none"],
)
def test_an_allowed_request_reaches_upstream_with_the_checked_host(
    upstream: tuple[ThreadingHTTPServer, list[list[str]]], headers: bytes
) -> None:
    server, seen = upstream
    authority = f"127.0.0.1:{server.server_address[1]}"
    policy = NetworkPolicy("allowlist", (authority,))
    request = f"GET http://{authority}/simple/ HTTP/1.1\r\n".encode() + headers + b"\r\n"
    with egress(policy) as proxy:
        answer = _ask(str(proxy.path), request)
    assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"), answer
    assert seen == [[authority]]
