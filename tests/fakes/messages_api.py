"""A loopback Messages API that plays scripted model turns, for agent tests.

The real Claude Code CLI talks to it through ``ANTHROPIC_BASE_URL``. It serves
``POST /v1/messages`` both streamed (SSE: ``message_start``,
``content_block_start/delta/stop`` for text and ``tool_use`` with
``input_json_delta``, ``message_delta``, ``message_stop``) and plain JSON.

Routing: only requests that offer tools (the agent's main loop) consume the
script; side requests the CLI makes on its own (titles, quota probes, token
counts) get a short canned answer, so the script stays in step whatever the
CLI version sends besides. Every request body is recorded, so tests can
assert on what reached the model (for example the failing test output in a
resumed session).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)
_NOT_FOUND = {"type": "error", "error": {"type": "not_found_error", "message": "unknown path"}}


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True)
class Turn:
    """One scripted model response (or failure) to one main-loop request."""

    text: str = ""
    tools: tuple[ToolUse, ...] = ()
    input_tokens: int = 120
    output_tokens: int = 40
    error_status: int | None = None  # e.g. 529: answer with an API error instead
    stall: bool = False  # start the stream, then send nothing more
    sticky: bool = False  # stay at the head of the script (every request gets it)

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tools else "end_turn"


def write(path: str, content: str) -> ToolUse:
    """A ``Write`` tool call (``path`` is absolute, as the CLI requires)."""
    return ToolUse("Write", {"file_path": path, "content": content})


def edit(path: str, old: str, new: str) -> ToolUse:
    """An ``Edit`` tool call replacing ``old`` with ``new`` in ``path``."""
    return ToolUse("Edit", {"file_path": path, "old_string": old, "new_string": new})


def bash(command: str) -> ToolUse:
    """A ``Bash`` tool call."""
    return ToolUse("Bash", {"command": command, "description": "run a command"})


def overloaded(sticky: bool = True) -> Turn:
    """Answer 529 ``overloaded_error``."""
    return Turn(error_status=529, sticky=sticky)


@dataclass
class _State:
    script: list[Turn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)
    exhausted: int = 0

    def next_turn(self) -> Turn:
        with self.lock:
            if not self.script:
                self.exhausted += 1
                return Turn(text="(script exhausted)")
            turn = self.script[0]
            if not turn.sticky:
                self.script.pop(0)
            return turn


class MessagesApiServer:
    """The server: ``with MessagesApiServer(script) as api: ... api.url``."""

    def __init__(self, script: list[Turn]) -> None:
        self.state = _State(list(script))
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every ``/v1/messages`` body received, in order."""
        with self.state.lock:
            return list(self.state.requests)

    @property
    def main_requests(self) -> list[dict[str, Any]]:
        """The requests that offered tools: the agent's own turns."""
        return [body for body in self.requests if body.get("tools")]

    @property
    def unknown_paths(self) -> list[str]:
        return list(self.state.unknown)

    def received_text(self) -> str:
        """All message text of the main-loop requests, joined (for assertions)."""
        return "\n".join(json.dumps(body.get("messages", [])) for body in self.main_requests)

    def __enter__(self) -> MessagesApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.state.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    state: _State
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._record_unknown()
        self._json(404, _NOT_FOUND)

    def do_POST(self) -> None:
        body = self._body()
        path = self.path.split("?", 1)[0]
        self.state.paths.append(path)
        if path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": 100})
        elif path == "/v1/messages":
            with self.state.lock:
                self.state.requests.append(body)
            self._messages(body)
        else:
            self._record_unknown()
            self._json(404, _NOT_FOUND)

    def _record_unknown(self) -> None:
        self.state.unknown.append(f"{self.command} {self.path}")

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def _messages(self, body: dict[str, Any]) -> None:
        turn = self.state.next_turn() if body.get("tools") else Turn(text="Fix issue")
        model = str(body.get("model") or "claude-sonnet-4-5")
        if turn.error_status is not None:
            self._api_error(turn.error_status)
        elif body.get("stream"):
            self._stream(turn, model)
        else:
            self._json(200, _message(turn, model, list(_blocks(turn))))

    def _api_error(self, status: int) -> None:
        kind = {529: "overloaded_error", 429: "rate_limit_error"}.get(status, "api_error")
        self._json(status, {"type": "error", "error": {"type": kind, "message": kind}})

    def _json(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_{next(_ids)}")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, turn: Turn, model: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        start = _message(turn, model, [])
        start["usage"] = {"input_tokens": turn.input_tokens, "output_tokens": 1}
        self._event("message_start", {"type": "message_start", "message": start})
        if turn.stall:
            self.state.closing.wait(300)
            return
        for index, block in enumerate(_blocks(turn)):
            for name, data in _block_events(index, block):
                self._event(name, data)
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": turn.output_tokens},
            },
        )
        self._event("message_stop", {"type": "message_stop"})

    def _event(self, name: str, data: Mapping[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()


def _blocks(turn: Turn) -> Iterator[dict[str, Any]]:
    if turn.text:
        yield {"type": "text", "text": turn.text}
    for tool in turn.tools:
        yield {
            "type": "tool_use",
            "id": f"toolu_{next(_ids):06d}",
            "name": tool.name,
            "input": dict(tool.input),
        }


def _block_events(index: int, block: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    if block["type"] == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
    else:
        start = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    yield (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": start,
        },
    )
    yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def _message(turn: Turn, model: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": turn.stop_reason if content else None,
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
    }
