"""The Claude Code CLI, headless: ``claude -p --output-format stream-json``.

The prompt goes in on stdin (closed once written), never through a shell.
Edits are allowed by ``--permission-mode acceptEdits`` plus an explicit
``--allowedTools`` list (the CLI refuses to skip permissions as root).
Stream events used: ``system``/``init`` (session id), ``assistant`` messages
(each ``tool_use`` block becomes one ``tool`` event) and the final ``result``
(subtype, ``is_error``, turns, usage, ``total_cost_usd``,
``permission_denials``, ``api_error_status``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.agents.base import (
    AgentRequest,
    AgentResult,
    blocked_reason,
    checked_session,
    effective_budget,
    outcome_words,
    result_data,
    summarise,
)
from pipeline.agents.streams import JsonLines, RedactingSink, run_stream
from pipeline.config.settings import AgentPreset
from pipeline.core.events import EventSink
from pipeline.core.proc import CommandResult, StopToken

_INPUT_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def claude_argv(preset: AgentPreset, request: AgentRequest) -> list[str]:
    """The CLI's argv for one invocation (the prompt itself goes to stdin)."""
    argv = [*(preset.command or ("claude",)), "-p", "--output-format", "stream-json", "--verbose"]
    argv += ["--permission-mode", "acceptEdits", "--allowedTools", ",".join(preset.allowed_tools)]
    if preset.append_system_prompt:
        argv += ["--append-system-prompt", preset.append_system_prompt]
    if preset.model:
        argv += ["--model", preset.model]
    if preset.max_turns is not None:
        argv += ["--max-turns", str(preset.max_turns)]
    budget = effective_budget(preset.max_budget_usd, request.max_budget_usd)
    if budget is not None:
        argv += ["--max-budget-usd", f"{budget:.4f}"]
    if preset.mcp_config is not None:
        argv += ["--mcp-config", str(preset.mcp_config)]
    if request.resume_session:
        argv += ["--resume", request.resume_session]
    return argv + list(preset.extra_args)


def tool_summary(name: str, tool_input: object, workdir: Path | None = None) -> str:
    """``Write src/app.py``, ``Bash pytest -q``: one bounded line per tool call."""
    if not isinstance(tool_input, Mapping):
        return summarise(f"{name} {tool_input}")
    for key in ("file_path", "notebook_path", "path", "command", "pattern", "url", "query"):
        value = tool_input.get(key)
        if isinstance(value, str):
            return summarise(f"{name} {_relative(value, workdir)}")
    return summarise(f"{name} {dict(tool_input)}")


def _relative(value: str, workdir: Path | None) -> str:
    if workdir is not None and value.startswith(str(workdir) + "/"):
        return value[len(str(workdir)) + 1 :]
    return value


@dataclass
class ClaudeStreamParser:
    """Turns ``stream-json`` lines into tool events and the final result."""

    events: EventSink
    workdir: Path | None = None
    done: threading.Event = field(default_factory=threading.Event)
    session_id: str | None = None
    tool_calls: int = 0
    last_text: str = ""
    final: dict[str, object] | None = None

    def __post_init__(self) -> None:
        self._lines = JsonLines(self.events, "claude")
        self._reported: str | None = None

    def feed(self, line: str) -> None:
        event = self._lines.decode(line)
        if event is None:
            return
        kind = event.get("type")
        reported = event.get("session_id")
        if isinstance(reported, str) and reported != self._reported:
            self._reported = reported  # every event repeats it: judged once
            self.session_id = checked_session(reported, self.events, "claude")
        if kind == "system" and event.get("subtype") == "init":
            self.events("agent", f"claude session {self.session_id or 'without an id'} started")
        elif kind == "assistant":
            self._assistant(event.get("message"))
        elif kind == "result":
            self.final = event
            self.done.set()

    def _assistant(self, message: object) -> None:
        if not isinstance(message, Mapping):
            return
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "tool_use":
                self.tool_calls += 1
                name = str(block.get("name"))
                self.events(
                    "tool", tool_summary(name, block.get("input"), self.workdir), {"tool": name}
                )
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                self.last_text = str(block["text"])

    def result(self, command: CommandResult) -> AgentResult | None:
        if self.final is None:
            return None
        final = self.final
        text = final.get("result") if isinstance(final.get("result"), str) else self.last_text
        denials = tuple(_denial(item) for item in _list(final.get("permission_denials")))
        for denial in denials:
            self.events("agent", f"claude: permission denied: {denial}")
        usage = final.get("usage") if isinstance(final.get("usage"), Mapping) else {}
        assert isinstance(usage, Mapping)
        return AgentResult(
            session_id=self.session_id,
            subtype=_str(final.get("subtype")),
            is_error=bool(final.get("is_error")),
            num_turns=_int(final.get("num_turns")),
            tokens_in=sum(_int(usage.get(key)) for key in _INPUT_KEYS),
            tokens_out=_int(usage.get("output_tokens")),
            cost_usd=_float(final.get("total_cost_usd")),
            result_text=str(text or ""),
            blocked_reason=blocked_reason(str(text or "")),
            api_error_status=_int(final.get("api_error_status")) or None,
            permission_denials=denials,
            tool_calls=self.tool_calls,
            errors=tuple(str(error) for error in _list(final.get("errors"))),
            exit_code=command.returncode,
            lingered=command.lingered,
        )


def _denial(item: object) -> str:
    if isinstance(item, Mapping):
        return tool_summary(str(item.get("tool_name")), item.get("tool_input"))
    return summarise(item)


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# A count or a cost outside these bounds is not a usage report but a broken one:
# it reads as 0 instead of overflowing the store's integer columns.
MAX_REPORTED = 2**53


def _int(value: object) -> int:
    return int(_float(value))


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    number = float(value)
    return number if math.isfinite(number) and 0 <= number < MAX_REPORTED else 0.0


class ClaudeAgent:
    """The ``claude`` preset."""

    def __init__(self, preset: AgentPreset) -> None:
        self.preset = preset
        self.name = preset.name

    def run(
        self, request: AgentRequest, *, events: EventSink, stop: StopToken | None
    ) -> AgentResult:
        events = RedactingSink(events, self.preset)
        result, _ = run_stream(
            self.preset,
            claude_argv(self.preset, request),
            request,
            lambda timeline: ClaudeStreamParser(timeline, request.workdir),
            events=events,
            stop=stop,
        )
        events(
            "agent",
            f"claude finished: {outcome_words(result)}, {result.num_turns} turns, "
            f"${result.cost_usd:.4f}",
            result_data(result),
        )
        return result
