"""Parsing ``codex exec --json``: one JSON event per line, as Codex CLI 0.169 writes them.

Events (``tests/fixtures/codex/`` holds recorded streams): ``thread.started``
(``thread_id``, the session to resume), ``turn.started``, ``item.started`` and
``item.completed`` (``item.type``: ``command_execution`` with ``command``,
``exit_code``; ``file_change`` with ``changes`` of absolute ``path`` and
``kind``; ``mcp_tool_call``; ``web_search``; ``agent_message`` with ``text``;
``error`` with ``message``), a top-level ``error`` (``message``: a retry
notice or the final error), then ``turn.completed`` (``usage``:
``input_tokens``, cached ones included, ``cached_input_tokens``,
``output_tokens``) or ``turn.failed`` (``error.message``). The usage is the
session's running total, so a resumed session reports what the earlier
invocations used as well (see ``UsageLedger`` in ``codex.py``).
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.agents.base import AgentResult, blocked_reason, checked_session, summarise
from pipeline.agents.streams import JsonLines
from pipeline.core.events import EventSink
from pipeline.core.proc import CommandResult

_TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")
# "exceeded retry limit, last status: 429 Too Many Requests", "unexpected status 401 Unauthorized"
MAX_OPEN_ITEMS = 1024  # tool items seen started, not yet completed, remembered at once
MAX_ERRORS = 20  # turn errors kept for the result (the first ones)
_STATUS = re.compile(r"\bstatus:? (\d{3})\b")
_SHELL_WRAPPER = re.compile(r"^\S*sh -l?c (.+)$", re.DOTALL)


@dataclass(frozen=True)
class CodexUsage:
    """Token counts as Codex reports them (``input`` includes ``cached``)."""

    input: int = 0
    cached: int = 0
    output: int = 0

    def minus(self, earlier: CodexUsage) -> CodexUsage:
        return CodexUsage(
            self.input - earlier.input, self.cached - earlier.cached, self.output - earlier.output
        )

    def covers(self, earlier: CodexUsage) -> bool:
        """True when every count is at least the ``earlier`` one (a running total went on)."""
        return (
            self.input >= earlier.input
            and self.cached >= earlier.cached
            and self.output >= earlier.output
        )


def shell_command(command: str) -> str:
    """The command the model asked for, without Codex's ``/bin/bash -lc '…'`` wrapper."""
    match = _SHELL_WRAPPER.match(command.strip())
    if match is None:
        return command
    try:
        words = shlex.split(match.group(1))
    except ValueError:
        return command
    return words[0] if len(words) == 1 else command


def item_summary(item: Mapping[str, object], workdir: Path | None = None) -> str:
    """One bounded line for a tool-like item: ``Shell pytest -q``, ``Patch update calc.py``."""
    kind = str(item.get("type"))
    if kind == "command_execution":
        return summarise(f"Shell {shell_command(str(item.get('command')))}")
    if kind == "file_change":
        changes = item.get("changes")
        paths = [
            f"{change.get('kind')} {_relative(str(change.get('path')), workdir)}"
            for change in (changes if isinstance(changes, list) else [])
            if isinstance(change, Mapping)
        ]
        return summarise(f"Patch {', '.join(paths)}")
    if kind == "mcp_tool_call":
        return summarise(f"MCP {item.get('server')}.{item.get('tool')}")
    if kind == "web_search":
        return summarise(f"WebSearch {item.get('query')}")
    return summarise(kind)


def _relative(path: str, workdir: Path | None) -> str:
    if workdir is not None and path.startswith(str(workdir) + "/"):
        return path[len(str(workdir)) + 1 :]
    return path


@dataclass
class CodexStreamParser:
    """Turns ``codex exec --json`` lines into timeline events and a result."""

    events: EventSink
    workdir: Path | None = None
    done: threading.Event = field(default_factory=threading.Event)
    session_id: str | None = None
    turns: int = 0
    usage: CodexUsage | None = None  # the running total; none after a failed turn
    tool_calls: int = 0
    last_text: str = ""
    errors: list[str] = field(default_factory=list)
    api_error_status: int | None = None
    failed: bool = False
    finished: bool = False
    open_items: dict[str, None] = field(default_factory=dict)  # insertion-ordered

    def __post_init__(self) -> None:
        self._lines = JsonLines(self.events, "codex")

    def feed(self, line: str) -> None:
        event = self._lines.decode(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "thread.started":
            self.session_id = checked_session(event.get("thread_id"), self.events, "codex")
            self.events("agent", f"codex thread {self.session_id or 'without an id'} started")
        elif kind == "turn.started":
            self.turns += 1
        elif kind == "turn.completed":
            self.usage = _usage(event.get("usage"))
            self._finish(failed=False)
        elif kind == "turn.failed":
            self._error(_message(event.get("error")))
            self._finish(failed=True)
        elif kind == "error":
            self.events("log", f"codex: {_message(event)}")
        elif isinstance(kind, str) and kind.startswith("item."):
            self._item(kind, event.get("item"))

    def _finish(self, *, failed: bool) -> None:
        self.failed = failed
        self.finished = True
        self.done.set()

    def _error(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:  # a stream repeating failures must not fill memory
            self.errors.append(message)
        status = _STATUS.search(message)
        if status is not None:
            self.api_error_status = int(status.group(1))

    def _item(self, kind: str, item: object) -> None:
        if not isinstance(item, Mapping):
            return
        item_type = item.get("type")
        item_id = _text(item.get("id"))
        if item_type in _TOOL_ITEMS:
            self._tool(kind, item_id, item)
        elif item_type == "agent_message" and kind == "item.completed":
            self.last_text = _text(item.get("text"))
            if self.last_text.strip():
                self.events("agent", summarise(f"codex: {self.last_text}"))
        elif item_type == "error" and kind == "item.completed":
            self.events("log", f"codex: {_message(item)}")

    def _tool(self, kind: str, item_id: str, item: Mapping[str, object]) -> None:
        """Count and show a tool item once, though it is reported started and completed.

        Only items started and not yet completed are remembered, at most
        ``MAX_OPEN_ITEMS`` (the oldest forgotten): a stream of a million items must not
        fill the daemon's memory.
        """
        if item_id in self.open_items:
            if kind == "item.completed":
                del self.open_items[item_id]
            return
        if kind != "item.completed":
            self.open_items[item_id] = None
            if len(self.open_items) > MAX_OPEN_ITEMS:
                del self.open_items[next(iter(self.open_items))]
        self.tool_calls += 1
        self.events("tool", item_summary(item, self.workdir), {"tool": str(item.get("type"))})

    def result(self, command: CommandResult) -> AgentResult | None:
        if not self.finished:
            return None
        return AgentResult(
            session_id=self.session_id,
            subtype="error_during_execution" if self.failed else "success",
            is_error=self.failed,
            num_turns=self.turns,
            tokens_in=self.usage.input if self.usage else 0,
            tokens_out=self.usage.output if self.usage else 0,
            result_text=self.last_text,
            blocked_reason=blocked_reason(self.last_text),
            api_error_status=self.api_error_status,
            tool_calls=self.tool_calls,
            errors=tuple(self.errors),
            exit_code=command.returncode,
            lingered=command.lingered,
        )


def _usage(value: object) -> CodexUsage:
    if not isinstance(value, Mapping):
        return CodexUsage()
    return CodexUsage(
        _int(value.get("input_tokens")),
        _int(value.get("cached_input_tokens")),
        _int(value.get("output_tokens")),
    )


def _message(value: object) -> str:
    if isinstance(value, Mapping):
        return summarise(value.get("message"), 400)
    return summarise(value, 400)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int:
    return max(value, 0) if isinstance(value, int) and not isinstance(value, bool) else 0
