"""Running an agent process whose stdout is one JSON event per line.

Both the Claude Code CLI (``stream-json``) and Codex (``exec --json``) speak
JSONL. A parser turns lines into timeline events and a final ``AgentResult``;
this module runs the process with the hang rules around it: no output for
``idle_timeout_s`` kills it, and a process still alive ``exit_grace_s`` after
its final event is killed with its result kept.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

from pipeline.agents.base import AgentRequest, AgentResult, check_process, scrub_env, summarise
from pipeline.errors import FatalError
from pipeline.events import EventSink
from pipeline.masking import mask, mask_data
from pipeline.proc import CommandResult, StopToken, run_command
from pipeline.settings import AgentPreset

MAX_GARBAGE_EVENTS = 20


class StreamParser(Protocol):
    """Consumes output lines; sets ``done`` once the final event was seen."""

    done: threading.Event

    def feed(self, line: str) -> None:
        ...

    def result(self, command: CommandResult) -> AgentResult | None:
        ...


class JsonLines:
    """Decodes lines, logging (boundedly) and skipping the ones that are not JSON objects."""

    def __init__(self, events: EventSink, agent: str) -> None:
        self.events = events
        self.agent = agent
        self.garbage = 0

    def decode(self, line: str) -> dict[str, object] | None:
        if not line.strip():
            return None
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        self.garbage += 1
        if self.garbage <= MAX_GARBAGE_EVENTS:
            self.events("log", f"{self.agent}: skipped a non-JSON line: {summarise(line)}")
        return None


class RedactingSink:
    """Passes events on with every registered secret masked, should the agent print one.

    The agent's own key is resolved (so registered) first; the rest of the
    daemon's secrets are in the same registry (``pipeline.masking``).
    """

    def __init__(self, events: EventSink, preset: AgentPreset) -> None:
        self.events = events
        if preset.api_key.configured:
            preset.api_key.resolve()

    def __call__(self, kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
        masked = mask_data(dict(data)) if data is not None else None
        self.events(kind, self.mask(message), masked)

    def mask(self, message: str) -> str:
        """``message`` with secrets masked, also when a bounded summary cut one short."""
        return mask(message)


def agent_env(preset: AgentPreset, request: AgentRequest) -> dict[str, str]:
    """The scrubbed environment with only the configured key and a per-repo HOME."""
    keep: tuple[str, str] | None = None
    if preset.api_key.configured:
        key = preset.api_key.resolve()
        if key is None:
            raise FatalError(
                "agent_api_key",
                f"agent {preset.name}: its API key ({preset.api_key.describe()}) is not set",
            )
        keep = (preset.api_key_var, key)
    env = scrub_env(request.env, keep_secret=keep)
    env.update(dict(preset.env))
    env["HOME"] = str(request.home)
    return env


def run_stream(
    preset: AgentPreset,
    argv: Sequence[str],
    request: AgentRequest,
    parser: StreamParser,
    *,
    events: EventSink,
    stop: StopToken | None,
    stdin_data: bytes | None,
) -> AgentResult:
    """Run the agent process to its final event; classify a process that gives none."""
    request.home.mkdir(parents=True, exist_ok=True)
    command = run_command(
        argv,
        cwd=request.workdir,
        env=agent_env(preset, request),
        idle_timeout_s=preset.idle_timeout_s,
        stop=stop,
        on_line=parser.feed,
        stdin_data=stdin_data,
        done=parser.done,
        done_grace_s=preset.exit_grace_s,
        tail_lines=60,
    )
    if command.lingered:
        events(
            "agent",
            f"{preset.name}: still running {preset.exit_grace_s:g}s after its result; killed",
        )
    return check_process(preset.name, command, parser.result(command))
