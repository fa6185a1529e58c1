"""Any agent as a command: an argv template with ``{prompt_file}`` and ``{workdir}``.

Each element of the template has the two placeholders replaced (plain text
replacement, no shell, no format mini-language), the prompt is written to a
file outside the worktree, and exit code 0 means success. The output is
scanned for ``BLOCKED: <reason>``, and its first ``MAX_OUTPUT_EVENTS``
non-blank lines reach the timeline as ``agent`` events (each bounded, the
agent's key masked; the rest is counted in one last event). Such agents have
no session to resume, so the implement loop sends them the whole context
each time.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pipeline.agents.base import (
    AgentRequest,
    AgentResult,
    blocked_reason,
    check_process,
    summarise,
)
from pipeline.agents.streams import RedactingSink, run_agent_process
from pipeline.config.settings import AgentPreset
from pipeline.core.errors import ConfigError
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken

MAX_OUTPUT_EVENTS = 200


class OutputEvents:
    """Forwards output lines as ``agent`` events: the first ``limit`` ones, then a count."""

    def __init__(self, events: RedactingSink, limit: int = MAX_OUTPUT_EVENTS) -> None:
        self.events = events
        self.limit = limit
        self.shown = 0
        self.hidden = 0

    def __call__(self, line: str) -> None:
        if not line.strip():
            return
        if self.shown >= self.limit:
            self.hidden += 1
            return
        self.shown += 1
        # Masked before it is cut short, so no part of the key survives the cut.
        self.events("agent", summarise(self.events.mask(line)), {"output_line": self.shown})

    def close(self) -> None:
        """One event for the lines past the limit, if any."""
        if self.hidden:
            self.events(
                "agent",
                f"... {self.hidden} more output line(s) not shown",
                {"output_lines_hidden": self.hidden},
            )


def command_argv(template: tuple[str, ...], prompt_file: Path, workdir: Path) -> list[str]:
    """The template with ``{prompt_file}`` and ``{workdir}`` filled in, per element."""
    return [
        part.replace("{prompt_file}", str(prompt_file)).replace("{workdir}", str(workdir))
        for part in template
    ]


class CommandAgent:
    """The ``command`` preset."""

    def __init__(self, preset: AgentPreset) -> None:
        if not preset.command:
            raise ConfigError(f"agents.{preset.name}.command: a command agent needs an argv")
        self.preset = preset
        self.name = preset.name

    def run(
        self, request: AgentRequest, *, events: EventSink, stop: StopToken | None
    ) -> AgentResult:
        request.home.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix="afk-prompt-", suffix=".md", dir=request.home)
        prompt_file = Path(name)
        output = OutputEvents(RedactingSink(events, self.preset))
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(request.prompt)
            result = self._run(request, prompt_file, output, stop)
        finally:
            prompt_file.unlink(missing_ok=True)
            output.close()
        events("agent", f"{self.name} exited with code {result.exit_code}")
        return result

    def _run(
        self,
        request: AgentRequest,
        prompt_file: Path,
        output: OutputEvents,
        stop: StopToken | None,
    ) -> AgentResult:
        blocked: list[str] = []  # the last line giving a BLOCKED reason: the one that counts

        def keep(line: str) -> None:
            output(line)
            if "BLOCKED:" in line and blocked_reason(line) is not None:
                blocked[:] = [line]

        command = run_agent_process(
            self.preset,
            command_argv(self.preset.command, prompt_file, request.workdir),
            request,
            output.events,
            stop=stop,
            on_line=keep,
            tail_lines=60,
        )
        if command.returncode is not None and command.returncode < 0:
            # Killed by a signal (a segfault, the OOM killer): a crash, not an answer.
            return check_process(self.name, command, None)
        result = AgentResult(
            subtype="success" if command.returncode == 0 else "error_exit",
            is_error=command.returncode != 0,
            result_text=command.output_tail[-4000:],
            blocked_reason=blocked_reason("\n".join(blocked)),
            errors=() if command.returncode == 0 else (summarise(command.output_tail[-400:], 400),),
            exit_code=command.returncode,
        )
        return check_process(self.name, command, result)
