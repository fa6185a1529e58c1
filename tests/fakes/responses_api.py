"""A loopback OpenAI Responses API that plays scripted model turns, for Codex tests.

The real Codex CLI talks to it as a custom model provider (``wire_api =
"responses"``, see ``codex_config``). It serves ``POST /v1/responses``
streamed as server-sent events, in the shapes of the ``openai`` package's
``ResponseStreamEvent`` types (``tests/fakes/README.md`` says which version and
where): ``response.created``, ``response.in_progress``,
``response.output_item.added|done``, ``response.content_part.added|done``,
``response.output_text.delta|done``, ``response.function_call_arguments.delta|done``,
``response.custom_tool_call_input.delta|done`` and ``response.completed`` with
``usage``; or ``response.failed``, or an HTTP error with an ``error`` body.

Tool calls use the tools the CLI offers in its request: ``exec_command`` (a
function call, JSON arguments with ``cmd``) and ``apply_patch`` (a custom,
freeform tool whose input is the patch text). Routing: only requests that offer
tools (the agent's turns) consume the script; anything else gets a short
canned answer. Every request body is recorded, so tests can assert on what
reached the model (the first conversation in a resumed session, tool output).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_ids = itertools.count(1)
_NOT_FOUND = {
    "error": {
        "message": "unknown path",
        "type": "invalid_request_error",
        "param": None,
        "code": "not_found",
    }
}
MODEL = "gpt-5.5"  # in the CLI's built-in model catalog: it offers apply_patch for it


@dataclass(frozen=True)
class ToolCall:
    """One tool call: a function call (JSON ``arguments``) or a custom call (text ``input``)."""

    name: str
    arguments: Mapping[str, Any] | None = None
    input: str | None = None


@dataclass(frozen=True)
class Turn:
    """One scripted model response (or failure) to one agent request."""

    text: str = ""
    tools: tuple[ToolCall, ...] = ()
    input_tokens: int = 120  # cached ones included, as the API counts them
    cached_input_tokens: int = 0
    output_tokens: int = 40
    error_status: int | None = None  # answer with an HTTP error instead
    failed: str | None = None  # answer ``response.failed`` with this error code
    stall: bool = False  # start the stream, then send nothing more
    sticky: bool = False  # stay at the head of the script (every request gets it)


def shell(command: str) -> ToolCall:
    """An ``exec_command`` call: Codex runs ``command`` in the user's shell."""
    return ToolCall("exec_command", arguments={"cmd": command, "yield_time_ms": 30000})


def apply_patch(patch: str) -> ToolCall:
    """An ``apply_patch`` call: ``patch`` in Codex's ``*** Begin Patch`` format."""
    return ToolCall("apply_patch", input=patch)


def add_file(path: str, content: str) -> str:
    """A patch adding ``path`` (relative to the session's directory) with ``content``."""
    lines = "".join(f"+{line}\n" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"


def update_file(path: str, old: str, new: str) -> str:
    """A patch replacing the line ``old`` with ``new`` in ``path``."""
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"


def codex_config(base_url: str, key_var: str, model: str = MODEL) -> str:
    """A ``$CODEX_HOME/config.toml`` pointing Codex at ``base_url`` (…/v1)."""
    return (
        f'model = "{model}"\nmodel_provider = "loopback"\n\n'
        "[model_providers.loopback]\n"
        'name = "loopback"\n'
        f'base_url = "{base_url}"\n'
        f'env_key = "{key_var}"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


@dataclass
class _State:
    script: list[Turn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
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


class ResponsesApiServer:
    """The server: ``with ResponsesApiServer(script) as api: ... api.base_url``."""

    def __init__(self, script: list[Turn]) -> None:
        self.state = _State(list(script))
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every ``/v1/responses`` body received, in order."""
        with self.state.lock:
            return list(self.state.requests)

    @property
    def main_requests(self) -> list[dict[str, Any]]:
        """The requests that offered tools: the agent's own turns."""
        return [body for body in self.requests if body.get("tools")]

    @property
    def unknown_paths(self) -> list[str]:
        return list(self.state.unknown)

    def write_codex_home(self, codex_home: Path, key_var: str) -> Path:
        """Write ``config.toml`` for this server into ``codex_home``; return the directory."""
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(codex_config(self.base_url, key_var))
        return codex_home

    def __enter__(self) -> ResponsesApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.state.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def input_text(body: Mapping[str, Any]) -> str:
    """The ``input`` items of one request, as JSON text (for assertions)."""
    return json.dumps(body.get("input", []))


def tool_outputs(body: Mapping[str, Any]) -> list[str]:
    """The outputs of earlier tool calls that one request carries back to the model."""
    kinds = ("function_call_output", "custom_tool_call_output")
    return [
        json.dumps(item.get("output"))
        for item in body.get("input", [])
        if isinstance(item, Mapping) and item.get("type") in kinds
    ]


class _Handler(BaseHTTPRequestHandler):
    state: _State
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self._record_unknown()
        self._json(404, _NOT_FOUND)

    def do_POST(self) -> None:
        body = self._body()
        if self.path.split("?", 1)[0] != "/v1/responses":
            self._record_unknown()
            self._json(404, _NOT_FOUND)
            return
        with self.state.lock:
            self.state.requests.append(body)
            self.state.headers.append({k.lower(): v for k, v in self.headers.items()})
        turn = self.state.next_turn() if body.get("tools") else Turn(text="ok")
        if turn.error_status is not None:
            self._api_error(turn.error_status)
        else:
            self._stream(turn, str(body.get("model") or MODEL))

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

    def _api_error(self, status: int) -> None:
        kind, code = {
            429: ("requests", "rate_limit_exceeded"),
            401: ("invalid_request_error", "invalid_api_key"),
        }.get(status, ("server_error", "server_error"))
        message = f"scripted {code} ({status})"
        self._json(
            status, {"error": {"message": message, "type": kind, "param": None, "code": code}}
        )

    def _json(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_{next(_ids)}")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, turn: Turn, model: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sequence = itertools.count()
        response = _response(model)
        for name in ("response.created", "response.in_progress"):
            self._event({"type": name, "response": response}, sequence)
        if turn.stall:
            self.state.closing.wait(300)
            return
        output = []
        for index, item in enumerate(_items(turn)):
            output.append(item)
            for event in _item_events(index, item):
                self._event(event, sequence)
        self._event(_final(turn, response, output), sequence)

    def _event(self, data: dict[str, Any], sequence: Iterator[int]) -> None:
        data = {**data, "sequence_number": next(sequence)}
        self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()


def _response(model: str) -> dict[str, Any]:
    return {
        "id": f"resp_{next(_ids):06d}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "in_progress",
        "model": model,
        "output": [],
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }


def _final(turn: Turn, response: dict[str, Any], output: list[dict[str, Any]]) -> dict[str, Any]:
    usage = {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_input_tokens},
        "output_tokens": turn.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": turn.input_tokens + turn.output_tokens,
    }
    if turn.failed is not None:
        error = {"code": turn.failed, "message": f"scripted failure: {turn.failed}"}
        final = {**response, "status": "failed", "error": error, "output": output}
        return {"type": "response.failed", "response": final}
    final = {**response, "status": "completed", "output": output, "usage": usage}
    return {"type": "response.completed", "response": final}


def _items(turn: Turn) -> Iterator[dict[str, Any]]:
    if turn.text:
        part = {"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}
        yield {
            "id": f"msg_{next(_ids):06d}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [part],
        }
    for tool in turn.tools:
        number = next(_ids)
        if tool.input is not None:
            yield {
                "id": f"ctc_{number:06d}",
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": f"call_{number:06d}",
                "name": tool.name,
                "input": tool.input,
            }
        else:
            yield {
                "id": f"fc_{number:06d}",
                "type": "function_call",
                "status": "completed",
                "call_id": f"call_{number:06d}",
                "name": tool.name,
                "arguments": json.dumps(dict(tool.arguments or {})),
            }


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    where = {"output_index": index, "item_id": item["id"]}
    yield {"type": "response.output_item.added", "output_index": index, "item": _started(item)}
    if item["type"] == "message":
        yield from _text_events(where, item["content"][0])
    elif item["type"] == "function_call":
        yield {
            "type": "response.function_call_arguments.delta",
            **where,
            "delta": item["arguments"],
        }
        yield {
            "type": "response.function_call_arguments.done",
            **where,
            "arguments": item["arguments"],
        }
    else:
        yield {"type": "response.custom_tool_call_input.delta", **where, "delta": item["input"]}
        yield {"type": "response.custom_tool_call_input.done", **where, "input": item["input"]}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def _started(item: dict[str, Any]) -> dict[str, Any]:
    empty = {
        "message": ("content", []),
        "function_call": ("arguments", ""),
        "custom_tool_call": ("input", ""),
    }[item["type"]]
    return {**item, "status": "in_progress", empty[0]: empty[1]}


def _text_events(where: dict[str, Any], part: dict[str, Any]) -> Iterator[dict[str, Any]]:
    at = {**where, "content_index": 0}
    yield {"type": "response.content_part.added", **at, "part": {**part, "text": ""}}
    yield {"type": "response.output_text.delta", **at, "delta": part["text"], "logprobs": []}
    yield {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []}
    yield {"type": "response.content_part.done", **at, "part": part}
