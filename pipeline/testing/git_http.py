"""Loopback git remotes for credential and hang tests.

``GitHttpServer`` serves the bare repositories under ``root`` through
``git http-backend`` (CGI) on 127.0.0.1, answering 401 unless the request
carries HTTP Basic auth with the expected password. It records the usernames
it saw (never the passwords) and what each authorised request asked for, and
counts every request. With ``stall`` set it
accepts requests whose path contains that text and never answers them, like a
remote that hangs mid-transfer. ``SilentServer`` accepts TCP connections and
never says a word (a hung ``git://`` daemon).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType


class _Handler(BaseHTTPRequestHandler):
    server: _GitServer

    def _authorised(self) -> str | None:
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode("utf-8").partition(":")
        return user if password == self.server.token else None

    def _handle(self) -> None:
        self.server.hits += 1
        stall = self.server.stall
        if stall is not None and stall in self.path:
            self.server.stalled += 1
            self.server.unstalled.wait()  # set by close(): the answer never comes
            return
        user = self._authorised()
        if user is None:
            self.server.refused += 1
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="afk-test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.server.users.append(user)
        self.server.served.append(self.path.partition("?")[0].rsplit("/", 1)[-1])
        self._cgi(user)

    def _cgi(self, user: str) -> None:
        path, _, query = self.path.partition("?")
        body = self._body()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user,
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> bytes:
        """The request body: ``Content-Length`` bytes, or chunks (git's large pushes)."""
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()  # the blank line after the last chunk
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    do_GET = do_POST = _handle

    def log_message(self, format: str, *args: object) -> None:
        return None


class _GitServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, token: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root, self.token = root, token
        self.users: list[str] = []
        self.served: list[str] = []  # last path part of each authorised request
        self.refused = self.hits = self.stalled = 0
        self.stall: str | None = None
        self.unstalled = threading.Event()


class GitHttpServer:
    """``url(name)`` is the HTTP URL of bare repo ``root/name``."""

    def __init__(self, root: Path, token: str) -> None:
        self._server = _GitServer(root, token)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}"

    @property
    def users(self) -> list[str]:
        return list(self._server.users)

    @property
    def served(self) -> list[str]:
        """What each authorised request asked for: ``info/refs``, ``git-upload-pack``, ..."""
        return list(self._server.served)

    @property
    def refused(self) -> int:
        return self._server.refused

    @property
    def hits(self) -> int:
        """Requests of any kind, answered or not."""
        return self._server.hits

    @property
    def stalled(self) -> int:
        return self._server.stalled

    def stall(self, path_part: str | None) -> None:
        """Never answer requests whose path contains ``path_part`` ("" for all); None: serve."""
        self._server.stall = path_part

    def close(self) -> None:
        self._server.unstalled.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> GitHttpServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never writes a byte."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    @property
    def connections(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self._held.append(connection)

    def close(self) -> None:
        self._closed.set()
        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self._socket.close()
        for connection in self._held:
            connection.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
