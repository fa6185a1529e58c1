"""Which ports an allowlist entry opens: ``host`` only HTTPS and HTTP, ``host:port`` that one.

An entry without a port used to let through every port of its host: ``pypi.org``
opened ``pypi.org:22``, and an internal registry's name opened whatever else that
machine serves (the daemon's API, a database). The agent is the attacker here: it
asks the proxy in the sandbox for an allowed host on another port.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pipeline.agents.streams import model_hosts
from pipeline.config.presets import AgentPreset
from pipeline.sandbox.network import NetworkPolicy, egress


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two loopback ports that accept connections and record them (nothing answers)."""
    made = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    for server in made:
        server.setblocking(False)
    yield made[0], made[1]
    for server in made:
        server.close()


def _port(server: socket.socket) -> int:
    return int(server.getsockname()[1])


def _reached(server: socket.socket) -> bool:
    """Whether anything connected to ``server`` (the proxy connects before it answers)."""
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def _connect(path: str, target: str) -> bytes:
    """``CONNECT target`` through the proxy: its answer's head."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := conn.recv(65536)):
            answer += chunk
        return answer


def test_a_host_without_a_port_does_not_open_its_other_ports(
    listeners: tuple[socket.socket, socket.socket],
) -> None:
    """``127.0.0.1`` on the list: a CONNECT to one of its other ports is refused, told to
    the timeline with how to allow it, and never reaches the port."""
    target = f"127.0.0.1:{_port(listeners[0])}"
    told: list[tuple[str, str]] = []
    policy = NetworkPolicy("allowlist", ("127.0.0.1",))
    with egress(policy, lambda where, why: told.append((where, why))) as proxy:
        answer = _connect(str(proxy.path), target)
    assert answer.startswith(b"HTTP/1.1 403"), answer
    assert not _reached(listeners[0])
    assert [where for where, _ in told] == [target]
    assert "port" in told[0][1] and f'"{target}"' in answer.decode()
    assert "allow_hosts" in answer.decode()


def test_a_host_with_a_port_opens_exactly_that_port(
    listeners: tuple[socket.socket, socket.socket],
) -> None:
    """``127.0.0.1:P`` on the list: P is relayed, another port of the same host is not."""
    allowed, other = (_port(server) for server in listeners)
    policy = NetworkPolicy("allowlist", (f"127.0.0.1:{allowed}",))
    with egress(policy) as proxy:
        assert _connect(str(proxy.path), f"127.0.0.1:{allowed}").startswith(b"HTTP/1.1 200")
        assert _connect(str(proxy.path), f"127.0.0.1:{other}").startswith(b"HTTP/1.1 403")
    assert _reached(listeners[0])
    assert not _reached(listeners[1])


@pytest.mark.parametrize("entry", ["pypi.org", "*.pythonhosted.org", "[::1]"])
def test_an_entry_without_a_port_means_https_and_http(entry: str) -> None:
    host = entry.replace("*", "files").strip("[]")
    policy = NetworkPolicy("allowlist", (entry,))
    assert policy.allows(host, 443) and policy.allows(host, 80)
    assert not any(policy.allows(host, port) for port in (22, 5432, 8080, 8443))


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("http://127.0.0.1:41234/v1", "127.0.0.1:41234"),
        ("https://llm.internal/v1", "llm.internal:443"),
        ("http://llm.internal/v1", "llm.internal:80"),
        ("http://[::1]:8081", "[::1]:8081"),
    ],
)
def test_the_model_api_the_daemon_adds_carries_its_port(url: str, entry: str) -> None:
    """A ``*_BASE_URL`` (a loopback model server on any port) stays reachable, on its port."""
    preset = AgentPreset(name="a", kind="claude", env=(("ANTHROPIC_BASE_URL", url),))
    assert model_hosts(preset) == ("api.anthropic.com", entry)
    policy = NetworkPolicy("allowlist", model_hosts(preset))
    host, _, port = entry.rpartition(":")
    host = host.strip("[]")
    assert policy.allows(host, int(port))
    assert not policy.allows(host, int(port) + 1)
    assert policy.allows("api.anthropic.com", 443)
