"""Running an agent process whose stdout is one JSON event per line.

Both the Claude Code CLI (``stream-json``) and Codex (``exec --json``) speak
JSONL. A parser turns lines into timeline events and a final ``AgentResult``;
this module runs the process with the hang rules around it: no output for
``idle_timeout_s`` kills it, and a process still alive ``exit_grace_s`` after
its final event is killed with its result kept.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from pipeline.agents.base import AgentRequest, AgentResult, check_process, summarise
from pipeline.config.settings import AgentPreset
from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.core.masking import mask, mask_data
from pipeline.core.printable import well_formed
from pipeline.core.proc import CommandResult, StopToken
from pipeline.sandbox.jail import Jail
from pipeline.sandbox.network import NetworkPolicy, entry_for

MAX_GARBAGE_EVENTS = 20
MAX_STREAM_EVENTS = 1000  # timeline events (tool calls, messages) per agent invocation
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# The model API each agent kind reaches unless told otherwise.
KIND_HOSTS: dict[str, tuple[str, ...]] = {
    "claude": ("api.anthropic.com",),
    "codex": ("api.openai.com", "chatgpt.com"),
}


class StreamParser(Protocol):
    """Consumes output lines; sets ``done`` once the final event was seen."""

    done: threading.Event

    def feed(self, line: str) -> None: ...

    def result(self, command: CommandResult) -> AgentResult | None: ...


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
            return _well_formed(value) if _SURROGATE_ESCAPE.search(line) else value
        self.garbage += 1
        if self.garbage <= MAX_GARBAGE_EVENTS:
            self.events("log", f"{self.agent}: skipped a non-JSON line: {summarise(line)}")
        return None


def _well_formed(value: Any) -> Any:
    """A decoded JSON value whose strings hold no half surrogate pair (see ``well_formed``)."""
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, dict):
        return {well_formed(key): _well_formed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_well_formed(item) for item in value]
    return value


class CappedEvents:
    """Passes on the first ``limit`` events of one invocation's stream, then only counts.

    A stream of a million tool calls (a looping or hostile agent) would be a million
    rows on the run's timeline, each a write, the agent stalled behind them.
    """

    def __init__(self, events: EventSink, limit: int = MAX_STREAM_EVENTS) -> None:
        self.events = events
        self.limit = limit
        self.shown = 0
        self.hidden = 0

    def __call__(self, kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
        if self.shown >= self.limit:
            self.hidden += 1
            return
        self.shown += 1
        self.events(kind, message, data)

    def close(self) -> None:
        """One event for those past the limit, if any."""
        if self.hidden:
            self.events(
                "agent",
                f"... {self.hidden} more event(s) of this invocation not shown",
                {"events_hidden": self.hidden},
            )


class RedactingSink:
    """Passes events on with every registered secret masked, should the agent print one.

    The agent's own key is resolved (so registered) first; the rest of the
    daemon's secrets are in the same registry (``pipeline.core.masking``).
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
    """The agent's explicit environment: the pass-through list, its ``env``, its own key."""
    settings = {**dict(preset.env), **request.extra_env}
    if preset.api_key.configured:
        key = preset.api_key.resolve()
        if key is None:
            raise FatalError(
                "agent_api_key",
                f"agent {preset.name}: its API key ({preset.api_key.describe()}) is not set",
            )
        settings[preset.api_key_var] = key
    return request.confinement.environment(extra_pass=preset.pass_env, settings=settings)


def run_agent_process(
    preset: AgentPreset,
    argv: Sequence[str],
    request: AgentRequest,
    events: EventSink,
    **options: Any,
) -> CommandResult:
    """Run the agent's process confined, with its network policy and install dir."""
    request.home.mkdir(parents=True, exist_ok=True)
    installed = (*install_roots(argv[0], agent_env_path(request)), *named_files(preset.command))
    jail = request.confinement.with_read_only(installed)
    return jail.run(
        argv,
        cwd=request.workdir,
        env=agent_env(preset, request),
        network=agent_policy(preset, jail),
        events=events,
        idle_timeout_s=preset.idle_timeout_s,
        **options,
    )


def agent_env_path(request: AgentRequest) -> str | None:
    return request.confinement.environment().get("PATH")


def agent_policy(preset: AgentPreset, jail: Jail) -> NetworkPolicy:
    """The preset's network policy, its model API included."""
    return jail.agent_network(preset.network, (*preset.allow_hosts, *model_hosts(preset)))


def model_hosts(preset: AgentPreset) -> tuple[str, ...]:
    """The model API the agent talks to: its kind's default and any ``*_BASE_URL`` it sets."""
    hosts = list(KIND_HOSTS.get(preset.kind, ()))
    for name, value in preset.env:
        if name.endswith("_BASE_URL"):
            parts = urlsplit(value)
            if parts.hostname:
                default = 443 if parts.scheme == "https" else 80
                hosts.append(entry_for(parts.hostname, parts.port or default))
    return tuple(hosts)


def named_files(template: Sequence[str]) -> tuple[Path, ...]:
    """Files the operator named in the agent's command (a script, a config): shown read-only."""
    return tuple(
        Path(part)
        for part in template
        if part.startswith("/") and "{" not in part and Path(part).is_file()
    )


def install_roots(command: str, path: str | None) -> tuple[Path, ...]:
    """Where the agent's executable is installed, so a hidden directory does not hide it.

    An npm installation needs its whole ``node_modules``; anything else its directory.
    """
    found = shutil.which(command, path=path) if "/" not in command else command
    if found is None:
        return ()
    real = Path(found).resolve()
    parts = real.parts
    if "node_modules" in parts:
        return (Path(*parts[: parts.index("node_modules") + 1]),)
    return (real.parent,)


P = TypeVar("P", bound=StreamParser)


def run_stream(
    preset: AgentPreset,
    argv: Sequence[str],
    request: AgentRequest,
    parser_for: Callable[[EventSink], P],
    *,
    events: EventSink,
    stop: StopToken | None,
) -> tuple[AgentResult, P]:
    """Run the agent process, the prompt on its stdin, to its final event; classify a
    process that gives none. The parser, built on a capped timeline, is returned too."""
    timeline = CappedEvents(events)
    parser = parser_for(timeline)
    try:
        command = run_agent_process(
            preset,
            argv,
            request,
            events,
            stop=stop,
            on_line=parser.feed,
            stdin_data=request.prompt.encode("utf-8"),
            done=parser.done,
            done_grace_s=preset.exit_grace_s,
            tail_lines=60,
        )
    finally:
        timeline.close()
    if command.lingered:
        events(
            "agent",
            f"{preset.name}: still running {preset.exit_grace_s:g}s after its result; killed",
        )
    return check_process(preset.name, command, parser.result(command)), parser
