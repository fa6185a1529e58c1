"""Builders for the non-repository sections of the configuration file.

Each builder reads one ``Table`` into one frozen settings dataclass, with the
defaults of ``pipeline.config.settings``; problems go to the table's problem list.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.config.reader import ENV_NAME, Table, describe_value
from pipeline.config.settings import (
    AgentPreset,
    HttpSettings,
    NotifySettings,
    SandboxSettings,
    SchedulerSettings,
    TrackerSettings,
    WorkspaceSettings,
)

TRACKER_KINDS = ("github", "gitea", "forgejo", "gitlab", "local")
UNTRUSTED_TEXT_MODES = ("omit", "quote")
AGENT_KINDS = ("claude", "codex", "command")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
SANDBOX_MODES = ("bwrap", "none")
NETWORK_MODES = ("allowlist", "open")
_HOST = re.compile(
    r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:\d{1,5})?$"
    r"|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$"
)
GITHUB_API = "https://api.github.com"
COMMAND_PLACEHOLDERS = frozenset({"prompt_file", "workdir"})
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|PASSWD)", re.IGNORECASE)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
# Integer fields of SchedulerSettings that may be zero; the others must be >= 1.
_SCHEDULER_ZERO_OK = frozenset({"max_recoveries"})


def builtin_trackers() -> dict[str, TrackerSettings]:
    """Trackers available without configuration: the local file-based one."""
    return {"local": TrackerSettings(name="local", kind="local")}


def builtin_agents() -> dict[str, AgentPreset]:
    """Agent presets available without configuration."""
    return {
        "claude": AgentPreset(name="claude", kind="claude", command=("claude",)),
        # `codex exec` reads the key for OpenAI's own API from CODEX_API_KEY.
        "codex": AgentPreset(
            name="codex", kind="codex", command=("codex",), api_key_var="CODEX_API_KEY"
        ),
    }


def check_url(table: Table, name: str, value: str, schemes: tuple[str, ...]) -> bool:
    """Report a URL whose scheme is not allowed or that names no host."""
    parts = urlsplit(value)
    if parts.scheme not in schemes or not parts.hostname:
        table.error(name, f"must be a {' or '.join(schemes)} URL with a host, got {value!r}")
        return False
    return True


def url(
    table: Table, name: str, required: bool = False, schemes: tuple[str, ...] = ("https", "http")
) -> str | None:
    value = table.string(name, required=required)
    if value is None or not check_url(table, name, value, schemes):
        return None
    return value.rstrip("/")


def scheduler(table: Table) -> SchedulerSettings:
    values: dict[str, object] = {}
    for f in dataclasses.fields(SchedulerSettings):
        default = f.default
        if isinstance(default, int) and not isinstance(default, float):
            minimum = 0 if f.name in _SCHEDULER_ZERO_OK else 1
            values[f.name] = table.integer(f.name, default, minimum)
        elif isinstance(default, float):
            values[f.name] = table.number(f.name, default)
    result = SchedulerSettings(**values)  # type: ignore[arg-type]
    if result.heartbeat_s >= result.lease_s:
        table.error("heartbeat_s", f"must be less than lease_s ({result.lease_s:g})")
    if result.backoff_base_s > result.backoff_max_s:
        table.error("backoff_base_s", f"must not exceed backoff_max_s ({result.backoff_max_s:g})")
    table.finish()
    return result


def workspace(table: Table) -> WorkspaceSettings:
    defaults = WorkspaceSettings()
    low = table.number("low_watermark", defaults.low_watermark, maximum=1.0)
    high = table.number("high_watermark", defaults.high_watermark, maximum=1.0)
    if not low < high:
        table.error(
            "low_watermark",
            f"must be less than high_watermark ({high:g}); "
            "need 0 < low_watermark < high_watermark <= 1",
        )
    result = WorkspaceSettings(
        fetch_debounce_s=table.number("fetch_debounce_s", defaults.fetch_debounce_s, strict=False),
        housekeeping_interval_s=table.number(
            "housekeeping_interval_s", defaults.housekeeping_interval_s
        ),
        high_watermark=high,
        low_watermark=low,
        capacity_bytes=byte_size(table, "capacity"),
    )
    table.finish()
    return result


def parse_size(value: object) -> int | None:
    """Bytes from an integer or a string like ``"10GiB"`` / ``"500MB"``; None if invalid."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    if not isinstance(value, str):
        return None
    match = _SIZE.match(value)
    if match is None:
        return None
    size = int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])
    return size if size > 0 else None


def byte_size(table: Table, name: str) -> int | None:
    """A byte count (``26214400``) or size (``"25MiB"``); None when absent or invalid."""
    if not table.has(name):
        return None
    raw = table.data[name]
    size = parse_size(raw)
    if size is None:
        table.error(
            name,
            "must be a positive byte count or a size like '10GiB' or '500MB', "
            f"got {describe_value(raw)}",
        )
    return size


def parse_listen(value: str) -> tuple[str, int] | None:
    """``host:port`` (``[::1]:port`` for IPv6) into parts; None if malformed."""
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return host, int(port)


def _listen(table: Table, name: str) -> tuple[str, int] | None:
    raw = table.string(name)
    if raw is None:
        return None
    parsed = parse_listen(raw)
    if parsed is None:
        table.error(name, f"must be host:port with a port 0-65535, got {raw!r}")
    return parsed


def http(table: Table) -> HttpSettings:
    defaults = HttpSettings()
    host, port = defaults.listen_host, defaults.listen_port
    listen = table.string("listen")
    if listen is not None:
        parsed = parse_listen(listen)
        if parsed is None:
            table.error("listen", f"must be host:port with a port 0-65535, got {listen!r}")
        else:
            host, port = parsed
    result = HttpSettings(
        listen_host=host,
        listen_port=port,
        api_token=table.secret("api_token"),
        max_webhook_body_bytes=byte_size(table, "max_webhook_body_bytes")
        or defaults.max_webhook_body_bytes,
        read_token=table.secret("read_token"),
        public_url=url(table, "public_url"),
        allowed_hosts=tuple(h.lower() for h in table.strings("allowed_hosts")),
        webhook_listen=_listen(table, "webhook_listen"),
    )
    table.finish()
    return result


def tracker(name: str, table: Table) -> TrackerSettings:
    defaults = TrackerSettings(name=name, kind="local")
    kind = table.choice("kind", TRACKER_KINDS, "", required=True) or ""
    base_url = url(table, "base_url", required=kind in ("gitea", "forgejo", "gitlab"))
    if kind == "github" and base_url is None and not table.has("base_url"):
        base_url = GITHUB_API
    result = TrackerSettings(
        name=name,
        kind=kind,
        base_url=base_url,
        token=table.secret("token"),
        webhook_secret=table.secret("webhook_secret"),
        trusted_actors=table.strings("trusted_actors"),
        trust_write_permission=table.boolean(
            "trust_write_permission", defaults.trust_write_permission
        ),
        ready_label=table.text("ready_label", defaults.ready_label),
        working_label=table.text("working_label", defaults.working_label),
        blocked_label=table.text("blocked_label", defaults.blocked_label),
        poll_interval_s=table.optional_number("poll_interval_s"),
        untrusted_text=table.choice("untrusted_text", UNTRUSTED_TEXT_MODES, defaults.untrusted_text)
        or defaults.untrusted_text,
    )
    table.finish()
    return result


def agent(name: str, table: Table) -> AgentPreset:
    implied = name if name in builtin_agents() else None
    kind = table.choice("kind", AGENT_KINDS, implied, required=implied is None) or "command"
    base = builtin_agents().get(kind, AgentPreset(name=name, kind=kind))
    command = table.command("command", required=kind == "command") or base.command
    if kind == "command":
        check_placeholders(table, "command", command)
    result = AgentPreset(
        name=name,
        kind=kind,
        command=command,
        model=table.string("model"),
        allowed_tools=table.strings("allowed_tools", base.allowed_tools),
        append_system_prompt=table.string("append_system_prompt"),
        max_turns=table.optional_integer("max_turns", 1),
        max_budget_usd=table.optional_number("max_budget_usd"),
        mcp_config=table.path("mcp_config"),
        extra_args=table.command("extra_args"),
        api_key=table.secret("api_key"),
        api_key_var=env_name(table, "api_key_var", base.api_key_var),
        env=agent_env(table.table("env")),
        idle_timeout_s=table.number("idle_timeout_s", base.idle_timeout_s),
        exit_grace_s=table.number("exit_grace_s", base.exit_grace_s, strict=False),
        network=table.choice("network", NETWORK_MODES),
        allow_hosts=hosts(table, "allow_hosts", base.allow_hosts),
        pass_env=pass_env(table, "pass_env"),
        price_input_usd_per_mtok=price(table, kind, "price_input_usd_per_mtok"),
        price_cached_input_usd_per_mtok=price(table, kind, "price_cached_input_usd_per_mtok"),
        price_output_usd_per_mtok=price(table, kind, "price_output_usd_per_mtok"),
    )
    table.finish()
    return result


def price(table: Table, kind: str, name: str) -> float | None:
    """A token price (USD per million), for the kind that reports tokens but no cost (codex)."""
    if not table.has(name):
        return None
    value = table.number(name, -1.0, 0.0, strict=False)  # -1: reported as an error
    if value < 0:
        return None
    if kind != "codex":
        table.error(
            name,
            f'only for kind = "codex" (a {kind} agent\'s cost is not computed from token prices)',
        )
    return value


def check_placeholders(table: Table, name: str, command: tuple[str, ...]) -> None:
    for word in command:
        for placeholder in re.findall(r"\{([^{}]*)\}", word):
            if placeholder not in COMMAND_PLACEHOLDERS:
                table.error(
                    name,
                    f"unknown placeholder {{{placeholder}}}; allowed: {{prompt_file}}, {{workdir}}",
                )


def env_name(table: Table, name: str, default: str) -> str:
    value = table.string(name)
    if value is None:
        return default
    if not ENV_NAME.match(value):
        table.error(name, f"must be an environment variable name, got {value!r}")
        return default
    return value


def agent_env(table: Table) -> tuple[tuple[str, str], ...]:
    """Non-secret variables for the agent; secret-looking names are refused."""
    pairs: list[tuple[str, str]] = []
    for key, value in table.data.items():
        table.known.add(key)
        if not ENV_NAME.match(key):
            table.error(key, "must be an environment variable name")
        elif _SECRET_NAME.search(key):
            table.error(key, "looks like a secret; use api_key_env/api_key_file instead of env")
        elif not isinstance(value, str):
            table.error(key, f"must be a string, got {describe_value(value)}")
        else:
            pairs.append((key, value))
    return tuple(sorted(pairs))


def notify(table: Table) -> NotifySettings:
    defaults = NotifySettings()
    result = NotifySettings(
        urls=table.secret("urls"),
        notify_success=table.boolean("notify_success", defaults.notify_success),
        retries=table.integer("retries", defaults.retries, 0),
        retry_delay_s=table.number("retry_delay_s", defaults.retry_delay_s, strict=False),
    )
    table.finish()
    return result


def sandbox(table: Table) -> SandboxSettings:
    defaults = SandboxSettings()
    result = SandboxSettings(
        mode=table.choice("mode", SANDBOX_MODES, defaults.mode) or defaults.mode,
        bwrap_path=table.path("bwrap"),
        network=table.choice("network", NETWORK_MODES, defaults.network) or defaults.network,
        allow_hosts=hosts(table, "allow_hosts", defaults.allow_hosts),
        pass_env=pass_env(table, "pass_env"),
        read_only_paths=paths(table, "read_only_paths"),
        writable_paths=paths(table, "writable_paths"),
        hidden_paths=paths(table, "hidden_paths"),
    )
    table.finish()
    return result


def hosts(table: Table, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """Network allowlist entries: ``host``, ``host:port``, ``*.domain`` or ``[v6]:port``."""
    values = table.strings(name, default)
    for value in values:
        if not _HOST.match(value):
            table.error(name, f"{value!r} is not a host, host:port or *.domain")
    return values


def pass_env(table: Table, name: str) -> tuple[str, ...]:
    """Host variable names passed into the sandbox; secret-looking names are refused."""
    values = table.strings(name)
    for value in values:
        if not ENV_NAME.match(value):
            table.error(name, f"{value!r} is not an environment variable name")
        elif _SECRET_NAME.search(value):
            table.error(
                name,
                f"{value!r} looks like a secret; an agent gets only its own "
                "key (api_key_env/api_key_file)",
            )
    return values


def paths(table: Table, name: str) -> tuple[Path, ...]:
    """Absolute paths (relative ones resolve against the config file's directory)."""
    return tuple(table.resolve(value) for value in table.strings(name))
