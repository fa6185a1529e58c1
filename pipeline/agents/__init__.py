"""Coding agents: the protocol, the presets and ``build_agent``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from pipeline.agents.base import (
    Agent,
    AgentRequest,
    AgentResult,
    blocked_reason,
    classify_result,
)
from pipeline.agents.claude import ClaudeAgent
from pipeline.agents.codex import CodexAgent
from pipeline.agents.command import CommandAgent
from pipeline.config.settings import AgentPreset
from pipeline.core.errors import ConfigError

__all__ = [
    "Agent",
    "AgentRequest",
    "AgentResult",
    "ClaudeAgent",
    "CodexAgent",
    "CommandAgent",
    "apply_overrides",
    "blocked_reason",
    "build_agent",
    "classify_result",
]

_KINDS: dict[str, Callable[[AgentPreset], Agent]] = {
    "claude": ClaudeAgent,
    "codex": CodexAgent,
    "command": CommandAgent,
}
_TUPLE_FIELDS = ("command", "allowed_tools", "extra_args")


def apply_overrides(
    preset: AgentPreset, overrides: Iterable[tuple[str, object]] = ()
) -> AgentPreset:
    """The preset with a repo's ``agent_overrides`` applied (unknown keys are errors)."""
    fields = {field.name for field in dataclasses.fields(AgentPreset)} - {"name", "kind", "api_key"}
    changes: dict[str, object] = {}
    for key, value in overrides:
        if key not in fields:
            raise ConfigError(
                f"agent_overrides.{key}: not an agent setting (known: {', '.join(sorted(fields))})"
            )
        changes[key] = tuple(value) if key in _TUPLE_FIELDS and isinstance(value, list) else value
    return dataclasses.replace(preset, **changes)  # type: ignore[arg-type]


def build_agent(preset: AgentPreset, overrides: Iterable[tuple[str, object]] = ()) -> Agent:
    """The agent for ``preset`` (``claude``, ``codex`` or ``command``)."""
    effective = apply_overrides(preset, overrides)
    factory = _KINDS.get(effective.kind)
    if factory is None:
        raise ConfigError(
            f"agents.{preset.name}.kind: {effective.kind!r} is not one of {', '.join(_KINDS)}"
        )
    return factory(effective)
