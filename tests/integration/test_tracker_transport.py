"""The forge clients' lean transport against a real loopback HTTP/1.1 server.

Keep-alive, a connection the server closed, a write never sent twice, gzip and
chunked answers, timeouts, TLS verification and proxies, seen from the server.
"""

from __future__ import annotations

import gzip
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from pipeline.core.errors import FatalError, RetryableError
from pipeline.trackers.http import ForgeHttp, HttpOptions
from pipeline.trackers.transport import LeanTransport, lean_transport


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self.requests: list[tuple[str, str, str]] = []  # method, path, authorization
        self.mode = "ok"
        self.script: list[tuple[int, dict[str, str], bytes]] = []  # answers given first
        self.seen_etags: list[str | None] = []
        self.release = threading.Event()
        self.lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, object]:
        with self.lock:
            self.connections += 1
        return super().get_request()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return None

    def setup(self) -> None:
        super().setup()
        self.served = 0

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        server = self.server
        server.requests.append((self.command, self.path, self.headers.get("Authorization", "")))
        server.seen_etags.append(self.headers.get("If-None-Match"))
        self.served += 1
        if server.script:
            status, headers, scripted = server.script.pop(0)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(scripted))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(scripted)
            return
        mode = server.mode
        if mode == "drop_reused" and self.served > 1:
            self.close_connection = True  # the request is read, no answer: a dead keep-alive
            return
        if mode == "hold":
            server.release.wait(30)
        body = json.dumps({"n": len(server.requests), "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if mode == "gzip":
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        if mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (body[:5], body[5:]):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if mode == "close_idle":
            self.close_connection = True  # closed after answering, without saying so


@contextmanager
def _serving(tls: ssl.SSLContext | None = None) -> Iterator[_Server]:
    server = _Server()
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


def _forge(url: str, transport: httpx.BaseTransport | None = None, **opts: float) -> ForgeHttp:
    options = HttpOptions(mutation_spacing_s=0.0, **opts)
    return ForgeHttp(
        "github", url, {"Authorization": "token t0k"}, options=options, transport=transport
    )


def test_the_forge_client_sends_through_the_lean_transport_and_keeps_one_connection() -> None:
    """Twenty reads are twenty requests on one kept-alive connection, token and all."""
    with _serving() as server:
        http = _forge(server.url)
        assert isinstance(http._client._transport, LeanTransport)
        answers = [http.get(f"/repos/o/r/issues/{n}", {"page": "1"}).data for n in range(20)]
        http.close()
    assert [a["path"] for a in answers] == [f"/repos/o/r/issues/{n}?page=1" for n in range(20)]
    assert server.connections == 1
    assert {auth for _, _, auth in server.requests} == {"token t0k"}


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    """The server hangs up after each answer without saying so: every read still works."""
    with _serving() as server:
        server.mode = "close_idle"
        http = _forge(server.url)
        for _ in range(3):
            assert http.get("/x").data["path"] == "/x"
        http.close()
    assert len(server.requests) == 3  # none sent twice
    assert server.connections == 3


def test_a_read_that_meets_a_dead_connection_is_sent_once_more() -> None:
    """A kept-alive connection dies under a GET: the GET goes again on a fresh one."""
    with _serving() as server:
        server.mode = "drop_reused"
        http = _forge(server.url)
        http.get("/first")
        assert http.get("/second").data["path"] == "/second"
        http.close()
    assert [path for _, path, _ in server.requests] == ["/first", "/second", "/second"]


def test_a_read_sent_again_goes_on_a_new_connection_not_another_dead_one() -> None:
    """Two kept-alive connections die together (a forge restart): one retry still suffices."""
    with _serving() as server:
        server.mode = "hold"  # two reads at once: two connections, both kept
        http = _forge(server.url)
        readers = [threading.Thread(target=http.get, args=("/a",)) for _ in range(2)]
        for reader in readers:
            reader.start()
        while len(server.requests) < 2:
            threading.Event().wait(0.01)
        server.mode = "drop_reused"
        server.release.set()
        for reader in readers:
            reader.join()
        assert http.get("/b").data["path"] == "/b"
        http.close()
    assert [path for _, path, _ in server.requests] == ["/a", "/a", "/b", "/b"]
    assert server.connections == 3


def test_a_write_that_meets_a_dead_connection_is_never_sent_twice() -> None:
    """The same death under a POST (a comment, a label): one request, a retryable error."""
    with _serving() as server:
        server.mode = "drop_reused"
        http = _forge(server.url)
        http.get("/first")
        with pytest.raises(RetryableError) as info:
            http.mutate("POST", "/repos/o/r/issues/1/comments", {"body": "hello"})
        http.close()
    assert info.value.kind == "network"
    assert [method for method, _, _ in server.requests] == ["GET", "POST"]


@pytest.mark.parametrize("mode", ["gzip", "chunked"])
def test_gzip_and_chunked_answers_are_decoded(mode: str) -> None:
    with _serving() as server:
        server.mode = mode
        http = _forge(server.url)
        assert http.get("/enc").data == {"n": 1, "path": "/enc"}
        http.close()


def test_no_answer_in_time_is_a_retryable_network_error() -> None:
    with _serving() as server:
        server.mode = "hold"
        http = _forge(server.url, timeout_s=0.2)
        with pytest.raises(RetryableError) as info:
            http.get("/slow")
        server.release.set()
        http.close()
    assert info.value.kind == "network"
    assert "no answer within 0.2s" in str(info.value)


def test_closing_the_client_closes_its_idle_connections() -> None:
    with _serving() as server:
        transport = LeanTransport()
        http = _forge(server.url, transport)
        http.get("/x")
        (conn,) = [c for conns in transport._idle.values() for c in conns]
        http.close()
        assert conn.sock is None


def test_a_proxy_in_the_environment_leaves_the_sending_to_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(lean_transport(), LeanTransport)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.test:3128")
    assert lean_transport() is None
    http = _forge("https://forge.test")
    assert not isinstance(http._client._transport, LeanTransport)
    http.close()


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_is_verified(tmp_path: Path) -> None:
    """An HTTPS forge with a certificate nobody trusts is refused; trusted, it answers."""
    cert, key = _certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with _serving(tls) as server:
        url = server.url.replace("http://", "https://")
        untrusting = _forge(url, LeanTransport())
        with pytest.raises(RetryableError) as info:
            untrusting.get("/x")
        untrusting.close()
        trusting = _forge(url, LeanTransport(ssl.create_default_context(cafile=str(cert))))
        assert trusting.get("/x").data["path"] == "/x"
        trusting.close()
    assert "CERTIFICATE_VERIFY_FAILED" in str(info.value)
    assert [path for _, path, _ in server.requests] == ["/x"]


def _listing(etag: str, items: list[int]) -> tuple[int, dict[str, str], bytes]:
    return 200, {"ETag": etag, "Content-Type": "application/json"}, json.dumps(items).encode()


def _collect(http: ForgeHttp) -> list[int] | None:
    return http.collect(
        "/repos/o/r/issues", {"state": "open"}, lambda page, p: None, conditional=True
    )


def test_an_unchanged_list_is_asked_again_with_its_etag_and_token() -> None:
    """The revalidation sent straight through the transport: If-None-Match, token, a 304."""
    with _serving() as server:
        server.script = [_listing('"v1"', [1, 2]), (304, {"ETag": '"v1"'}, b"")]
        http = _forge(server.url)
        assert _collect(http) == [1, 2]
        assert _collect(http) is None  # nothing changed
        server.script = [_listing('"v2"', [3])]
        assert _collect(http) == [3]  # changed: the new page, and its ETag kept
        server.script = [(304, {}, b"")]
        assert _collect(http) is None
        http.close()
    assert server.seen_etags == [None, '"v1"', '"v1"', '"v2"']
    assert [auth for _, _, auth in server.requests] == ["token t0k"] * 4
    assert {path for _, path, _ in server.requests} == {"/repos/o/r/issues?state=open"}


def test_a_moved_repo_answering_a_revalidation_with_a_redirect_is_followed() -> None:
    with _serving() as server:
        moved = f"{server.url}/repos/o/renamed/issues?state=open"
        server.script = [
            _listing('"v1"', [1]),
            (301, {"Location": moved}, b""),  # to the revalidation
            (301, {"Location": moved}, b""),  # to the same GET through httpx, which follows
            _listing('"v9"', [1, 9]),
        ]
        http = _forge(server.url)
        assert _collect(http) == [1]
        assert _collect(http) == [1, 9]
        http.close()
    paths = [path for _, path, _ in server.requests]
    assert paths == ["/repos/o/r/issues?state=open"] * 3 + ["/repos/o/renamed/issues?state=open"]


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ((429, {"Retry-After": "120"}, b""), "forge_rate_limited"),
        ((403, {"X-RateLimit-Remaining": "0"}, b'{"message": "rate limit"}'), "forge_rate_limited"),
        ((502, {}, b"bad gateway"), "forge_5xx"),
        ((404, {}, b'{"message": "Not Found"}'), "missing_repo"),
        ((401, {}, b'{"message": "Bad credentials"}'), "forge_auth"),
        ((200, {"ETag": '"v2"'}, b"not json"), "forge_bad_response"),
    ],
)
def test_a_revalidation_answered_with_an_error_is_classified_as_any_answer(
    answer: tuple[int, dict[str, str], bytes], kind: str
) -> None:
    """The hot path keeps the failure policy: rate limits stop the client, errors are named."""
    with _serving() as server:
        server.script = [_listing('"v1"', [1]), answer]
        http = _forge(server.url)
        assert _collect(http) == [1]
        with pytest.raises((RetryableError, FatalError)) as info:
            _collect(http)
        limited = http.not_before > 0
        http.close()
    assert info.value.kind == kind
    assert "/repos/o/r/issues?state=open" in str(info.value)
    assert limited == (kind == "forge_rate_limited")
