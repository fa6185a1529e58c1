"""Where an allowed plain-HTTP request goes: to the host the proxy checked, by name too.

The proxy decides on the host of an absolute-form request's URL. The request's own
``Host`` header is what a virtual-hosting upstream (a CDN in front of a registry)
routes by: one the agent chose would carry the request to another site served there,
past the allowlist. RFC 9112 (3.2.2): a proxy replaces it with the URL's authority.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pipeline.sandbox.network import NetworkPolicy, egress
from pipeline.testing.receiver import Receiver


@pytest.fixture
def upstream() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


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
    upstream: Receiver, headers: bytes
) -> None:
    authority = f"127.0.0.1:{upstream.port}"
    policy = NetworkPolicy("allowlist", (authority,))
    request = f"GET http://{authority}/simple/ HTTP/1.1\r\n".encode() + headers + b"\r\n"
    with egress(policy) as proxy:
        answer = _ask(str(proxy.path), request)
    assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"), answer
    hosts = [[v for k, v in r.header_lines if k.lower() == "host"] for r in upstream.received]
    assert hosts == [[authority]]
