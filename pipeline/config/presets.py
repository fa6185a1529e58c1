"""Agent presets: ``[agents.NAME]`` tables, the built-in ones, and a repository's changes.

An ``[agents.NAME]`` table is laid over the built-in preset of its kind (``claude``
and ``codex`` are built in; a table named like one takes its kind); a repository's
``agent_options`` keeps the preset fields it sets, applied when its runs start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Annotated

from pydantic import Field

from pipeline.config import values as v
from pipeline.config.secrets import SecretRef


@v.table
class AgentPreset:
    name: str
    kind: Annotated[str, v.one_of("claude", "codex", "command")]
    # executable (and fixed leading args); template for kind=command
    command: v.Command = ()
    model: v.Text | None = None
    allowed_tools: tuple[v.Text, ...] = ("Read", "Write", "Edit", "Bash", "Glob", "Grep")
    append_system_prompt: v.Text | None = None
    max_turns: Annotated[int, v.S, Field(ge=1, le=10**6)] | None = None
    max_budget_usd: v.Usd | None = None
    mcp_config: v.FilePath | None = None
    extra_args: v.Command = ()
    api_key: SecretRef = field(default_factory=SecretRef)
    api_key_var: v.EnvName = "ANTHROPIC_API_KEY"  # the variable the agent reads its key from
    env: v.Pairs = ()  # non-secret variables passed to the agent
    idle_timeout_s: v.Seconds = 600.0
    exit_grace_s: v.Delay = 10.0
    network: v.Network | None = None  # None: the [sandbox] default
    allow_hosts: tuple[v.Host, ...] = ()  # hosts this agent may reach besides the sandbox's
    pass_env: tuple[v.SafeEnv, ...] = ()  # host variables this agent gets besides the defaults
    # Token prices (USD per million) for agents that report tokens but no cost (codex).
    price_input_usd_per_mtok: v.Usd | None = None
    price_cached_input_usd_per_mtok: v.Usd | None = None  # default: the input price
    price_output_usd_per_mtok: v.Usd | None = None


BUILTIN_AGENTS = {
    "claude": AgentPreset(name="claude", kind="claude", command=("claude",)),
    # `codex exec` reads the key for OpenAI's own API from CODEX_API_KEY.
    "codex": AgentPreset(
        name="codex", kind="codex", command=("codex",), api_key_var="CODEX_API_KEY"
    ),
}


@v.table
class AgentTable(AgentPreset):
    """``[agents.NAME]``: laid over the built-in preset of its kind (NAME's if built in)."""

    name: str = ""
    kind: Annotated[str, v.one_of("claude", "codex", "command")] = ""  # "": missing


@v.table
class AgentOptions(AgentPreset):
    """``[repos.NAME.agent_options]``: what a repository changes of its agent preset."""

    name: str = ""
    kind: Annotated[str, Field(validation_alias=v.HIDE + "kind")] = "command"


def overrides(options: AgentPreset, keys: set[str]) -> tuple[tuple[str, object], ...]:
    """The ``(field, value)`` pairs of the preset fields the file's ``keys`` set."""
    keys = {"api_key" if k in ("api_key_env", "api_key_file") else k for k in keys}
    return tuple((k, getattr(options, k)) for k in sorted(keys) if not k.startswith(v.HIDE))


def preset(table: AgentTable, keys: set[str]) -> AgentPreset:
    kind = table.kind or (table.name if table.name in BUILTIN_AGENTS else "")
    base = BUILTIN_AGENTS.get(kind) or AgentPreset(name=table.name, kind=kind)
    return dataclasses.replace(base, name=table.name, **dict(overrides(table, keys)))  # type: ignore[arg-type]
