"""The HTTP layer itself: every text body masked on its way out; webhook bodies bounded."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from markupsafe import escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from pipeline.config.settings import HttpSettings
from pipeline.core.masking import register_secret
from pipeline.http.app import AppOptions, create_app, serve
from pipeline.http.masking import MaskingMiddleware
from pipeline.store import Store
from tests.integration.api_harness import make_settings

SECRET = 'SNTL-served"<&>-secret-42'
LIMIT = 1000


def _tiny_app(tmp_path: Path) -> Starlette:
    """Routes that put the secret in every kind of body, bypassing the store."""
    asset = tmp_path / "asset.js"
    asset.write_text("// static asset\n")

    async def stream(_: Request) -> Response:
        async def chunks() -> AsyncIterator[str]:
            for n in range(3):
                yield f"id: {n}\ndata: {json.dumps({'m': SECRET})}\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    routes = [
        Route("/plain", lambda _: PlainTextResponse(f"token {SECRET} end")),
        Route("/json", lambda _: JSONResponse({"error": f"bad {SECRET}"})),
        Route("/html", lambda _: HTMLResponse(f"<p>{escape(SECRET)}</p>")),
        Route("/stream", stream),
        Route("/asset", lambda _: FileResponse(asset)),
        Route(
            "/binary", lambda _: Response(SECRET.encode(), media_type="application/octet-stream")
        ),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(MaskingMiddleware)])
    app.state.ctx = SimpleNamespace(closing=threading.Event())  # what ServerHandle.stop sets
    return app


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[httpx.Client]:
    handle = serve(_tiny_app(tmp_path))
    try:
        with httpx.Client(base_url=handle.url, timeout=10.0) as client:
            yield client
    finally:
        handle.stop()


def test_text_bodies_are_masked_with_a_correct_length(tiny: httpx.Client) -> None:
    """Plain text, JSON (escaped) and HTML (escaped) bodies hide the secret; lengths match."""
    register_secret(SECRET)
    assert tiny.get("/plain").text == "token *** end"
    assert tiny.get("/json").json() == {"error": "bad ***"}
    assert tiny.get("/html").text == "<p>***</p>"
    for path in ("/plain", "/json", "/html"):
        response = tiny.get(path)
        assert int(response.headers["content-length"]) == len(response.content)


def test_streamed_events_are_masked_chunk_by_chunk(tiny: httpx.Client) -> None:
    """Each server-sent event is masked as it is sent."""
    register_secret(SECRET)
    body = tiny.get("/stream").text
    assert body.count('"m": "***"') == 3 and "SNTL" not in body


def test_files_and_binary_bodies_pass_unchanged(tiny: httpx.Client) -> None:
    """Static files and non-text bodies are not rewritten."""
    register_secret(SECRET)
    assert tiny.get("/asset").text == "// static asset\n"
    assert tiny.get("/binary").content == SECRET.encode()


def test_with_no_secret_known_bodies_are_untouched(tiny: httpx.Client) -> None:
    """Nothing registered: the middleware passes every body as the route made it."""
    assert SECRET in tiny.get("/plain").text


# Webhook bodies -----------------------------------------------------------------


class Recorder:
    """A webhook handler that records what reached it (nothing, for an oversized body)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(
        self, tracker: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, object]]:
        self.bodies.append(body)
        return 202, {"received": len(body)}


@pytest.fixture
def webhooks(database_url: str, tmp_path: Path) -> Iterator[tuple[str, Recorder]]:
    store = Store(database_url)
    store.upgrade()
    settings = make_settings(database_url, tmp_path)
    settings = replace(settings, http=HttpSettings(max_webhook_body_bytes=LIMIT))
    recorder = Recorder()
    handle = serve(create_app(store, settings, AppOptions(webhook_handler=recorder)))
    try:
        yield handle.url, recorder
    finally:
        handle.stop()
        store.close()


def test_a_body_within_the_limit_reaches_the_handler(webhooks: tuple[str, Recorder]) -> None:
    """Exactly the limit, declared or chunked, is read whole and handed over."""
    url, recorder = webhooks
    assert httpx.post(f"{url}/webhooks/gh", content=b"x" * LIMIT).status_code == 202

    def chunks() -> Iterator[bytes]:
        yield from (b"y" * 100 for _ in range(LIMIT // 100))

    assert httpx.post(f"{url}/webhooks/gh", content=chunks()).status_code == 202
    assert recorder.bodies == [b"x" * LIMIT, b"y" * LIMIT]


def test_an_oversized_chunked_body_is_413_before_the_handler(
    webhooks: tuple[str, Recorder],
) -> None:
    """A chunked body is counted as it arrives and refused past the limit."""
    url, recorder = webhooks

    def chunks() -> Iterator[bytes]:
        yield from (b"z" * 100 for _ in range(LIMIT // 100 + 1))

    response = httpx.post(f"{url}/webhooks/gh", content=chunks())
    assert response.status_code == 413
    assert "max_webhook_body_bytes" in response.json()["error"]
    assert recorder.bodies == []


def test_a_declared_oversized_body_is_413_before_a_byte_is_sent(
    webhooks: tuple[str, Recorder],
) -> None:
    """A Content-Length over the limit is answered at once: the client never sends the body."""
    url, recorder = webhooks
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /webhooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000\r\n\r\n"
        )
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413"), answer
    assert recorder.bodies == []
