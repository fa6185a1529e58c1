"""OpenAI Codex, headless: ``codex exec --json``.

Events (one JSON object per line): ``thread.started`` (``thread_id``, the
session to resume), ``turn.started``, ``turn.completed`` (``usage``:
``input_tokens``, ``cached_input_tokens``, ``output_tokens``),
``turn.failed`` (``error.message``), ``item.started|updated|completed``
(``item.type``: ``command_execution``, ``file_change``, ``mcp_tool_call``,
``web_search``, ``agent_message``, ``reasoning``, ``todo_list``, ``error``)
and a top-level ``error``. The prompt is read from stdin (``-``); a resumed
run is ``codex exec --json ... resume <thread_id> -``. Codex reports no
cost, so the per-run budget cannot be enforced from its stream.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.agents.base import (
    AgentRequest,
    AgentResult,
    blocked_reason,
    result_data,
    summarise,
)
from pipeline.agents.streams import JsonLines, RedactingSink, run_stream
from pipeline.events import EventSink
from pipeline.proc import CommandResult, StopToken
from pipeline.settings import AgentPreset

_TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")


def codex_argv(preset: AgentPreset, request: AgentRequest) -> list[str]:
    """``codex exec --json`` with the configured model; the prompt comes from stdin."""
    argv = [*(preset.command or ("codex",)), "exec", "--json", "--full-auto"]
    if preset.model:
        argv += ["--model", preset.model]
    argv += list(preset.extra_args)
    if request.resume_session:
        argv += ["resume", request.resume_session]
    return [*argv, "-"]


def item_summary(item: Mapping[str, object]) -> str:
    """One bounded line for a tool-like item."""
    kind = str(item.get("type") or item.get("item_type"))
    if kind == "command_execution":
        return summarise(f"Bash {item.get('command')}")
    if kind == "file_change":
        changes = item.get("changes")
        paths = [
            f"{change.get('kind')} {change.get('path')}"
            for change in (changes if isinstance(changes, list) else [])
            if isinstance(change, Mapping)
        ]
        return summarise(f"Patch {', '.join(paths)}")
    if kind == "mcp_tool_call":
        return summarise(f"MCP {item.get('server')}.{item.get('tool')}")
    if kind == "web_search":
        return summarise(f"WebSearch {item.get('query')}")
    return summarise(kind)


@dataclass
class CodexStreamParser:
    """Turns ``codex exec --json`` lines into tool events and a result."""

    events: EventSink
    done: threading.Event = field(default_factory=threading.Event)
    session_id: str | None = None
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tool_calls: int = 0
    last_text: str = ""
    errors: list[str] = field(default_factory=list)
    failed: bool = False
    finished: bool = False
    _seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._lines = JsonLines(self.events, "codex")

    def feed(self, line: str) -> None:
        event = self._lines.decode(line)
        if event is None:
            return
        kind = event.get("type")
        if kind in ("thread.started", "thread.resumed"):
            self.session_id = str(event.get("thread_id"))
            self.events("agent", f"codex thread {self.session_id} started")
        elif kind == "turn.started":
            self.turns += 1
        elif kind == "turn.completed":
            self._usage(event.get("usage"))
            self._finish(failed=False)
        elif kind == "turn.failed":
            self.errors.append(_message(event.get("error")))
            self._finish(failed=True)
        elif kind == "error":
            self.errors.append(_message(event))
        elif isinstance(kind, str) and kind.startswith("item."):
            self._item(kind, event.get("item"))

    def _finish(self, *, failed: bool) -> None:
        self.failed = failed
        self.finished = True
        self.done.set()

    def _usage(self, usage: object) -> None:
        if isinstance(usage, Mapping):
            self.tokens_in += _int(usage.get("input_tokens"))
            self.tokens_out += _int(usage.get("output_tokens"))

    def _item(self, kind: str, item: object) -> None:
        if not isinstance(item, Mapping):
            return
        item_type = item.get("type") or item.get("item_type")
        item_id = str(item.get("id"))
        if item_type in _TOOL_ITEMS and item_id not in self._seen:
            self._seen.add(item_id)
            self.tool_calls += 1
            self.events("tool", item_summary(item), {"tool": str(item_type)})
        elif item_type == "agent_message" and kind == "item.completed":
            self.last_text = str(item.get("text") or "")
            if self.last_text.strip():
                self.events("agent", summarise(f"codex: {self.last_text}"))
        elif item_type == "error" and kind == "item.completed":
            self.events("log", f"codex: {summarise(item.get('message'))}")

    def result(self, command: CommandResult) -> AgentResult | None:
        if not self.finished:
            return None
        return AgentResult(
            session_id=self.session_id,
            subtype="error_during_execution" if self.failed else "success",
            is_error=self.failed,
            num_turns=self.turns,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            result_text=self.last_text,
            blocked_reason=blocked_reason(self.last_text),
            tool_calls=self.tool_calls,
            errors=tuple(self.errors),
            exit_code=command.returncode,
            lingered=command.lingered,
        )


def _message(value: object) -> str:
    if isinstance(value, Mapping):
        return summarise(value.get("message"), 400)
    return summarise(value, 400)


def _int(value: object) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


class CodexAgent:
    """The ``codex`` preset."""

    def __init__(self, preset: AgentPreset) -> None:
        self.preset = preset
        self.name = preset.name

    def run(
        self, request: AgentRequest, *, events: EventSink, stop: StopToken | None
    ) -> AgentResult:
        events = RedactingSink(events, self.preset)
        result = run_stream(
            self.preset,
            codex_argv(self.preset, request),
            request,
            CodexStreamParser(events),
            events=events,
            stop=stop,
            stdin_data=request.prompt.encode("utf-8"),
        )
        events("agent", f"codex finished: {result.subtype}, {result.num_turns} turns",
               result_data(result))
        return result
