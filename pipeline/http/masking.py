"""Serve-time masking: every text response body passes through ``pipeline.core.masking``.

The store masks when it writes and reads, but a row written before a secret
was configured, or a message a handler builds itself, would still carry it;
this ASGI middleware masks every textual body (JSON, pages, fragments, the
plain-text log, each server-sent event) on its way out, whatever route made it.
The registry holds each secret's JSON- and HTML-escaped forms too, so what a
JSON encoder or the template engine did to it is masked as well.

A whole body is masked at once and its ``Content-Length`` recomputed. A
streamed body (the event stream) is masked as one text, not chunk by chunk: a
secret split across two chunks would show as two unmasked halves, so a
``StreamMasker`` holds back a chunk's end that could begin a secret until the
next chunk or the end of the body, and a UTF-8 character split across chunks
is decoded whole. Bytes that are not UTF-8 pass through as they are (decoded
with ``surrogateescape``), never making the body skip masking. A streamed body
of known length is a static file: passed as is.
"""

from __future__ import annotations

import codecs
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from pipeline.core.masking import has_secrets, mask
from pipeline.core.stream_mask import StreamMasker

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]

TEXT_TYPES = (b"text/", b"application/json", b"application/problem+json")


class MaskingMiddleware:
    """Masks registered secrets in every textual HTTP response body."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _MaskingSend(send))


class _MaskingSend:
    """The ``send`` of one response: holds the start until the body says how to mask it."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.start: Message | None = None
        self.masking = False
        self.streaming = False
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self.masker = StreamMasker()

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            self.masking = has_secrets() and _is_text(message)
            if not self.masking:
                await self._flush_start()
            return
        if message["type"] != "http.response.body" or not self.masking:
            await self._flush_start()
            await self.send(message)
            return
        await self._body(message)

    async def _body(self, message: Message) -> None:
        more = bool(message.get("more_body", False))
        if self.start is not None and more and _header(self.start, b"content-length"):
            self.masking = False  # a file of known length, streamed: not ours to rewrite
            await self._flush_start()
            await self.send(message)
            return
        raw = bytes(message.get("body", b""))
        if more or self.streaming:
            text = self.masker.feed(self.decoder.decode(raw, final=not more))
            body = _encoded(text if more else text + self.masker.close())
        else:
            body = _masked(raw)
        if self.start is not None:
            _set_length(self.start, None if more or self.streaming else len(body))
        self.streaming = self.streaming or more
        await self._flush_start()
        await self.send({**message, "body": body})

    async def _flush_start(self) -> None:
        if self.start is not None:
            start, self.start = self.start, None
            await self.send(start)


def _header(start: Message, name: bytes) -> bytes | None:
    for key, value in start.get("headers", []):
        if bytes(key).lower() == name:
            return bytes(value)
    return None


def _is_text(start: Message) -> bool:
    content_type = (_header(start, b"content-type") or b"").lower()
    return content_type.startswith(TEXT_TYPES)


def _set_length(start: Message, length: int | None) -> None:
    """Replace ``Content-Length`` (dropped for a stream, whose length is not known)."""
    headers = [(k, v) for k, v in start.get("headers", []) if bytes(k).lower() != b"content-length"]
    if length is not None:
        headers.append((b"content-length", str(length).encode("ascii")))
    start["headers"] = headers


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _masked(body: bytes) -> bytes:
    text = body.decode("utf-8", "surrogateescape")
    masked = mask(text)
    return body if masked == text else _encoded(masked)
