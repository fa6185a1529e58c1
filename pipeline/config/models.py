"""The configuration file's shape as pydantic models, one per TOML table.

These models describe the file (and give ``pipeline config schema``); unset keys
are ``None`` and take the defaults of ``pipeline.config.settings`` when the file
is turned into settings (``pipeline.config.build``). Validation is strict: TOML
values are typed, so ``"3"`` is not an integer and ``nan`` is not a number.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from pipeline.config import settings as s
from pipeline.config import values as v


class Table(BaseModel):
    """A TOML table: unknown keys, wrong types and non-finite numbers are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class Scheduler(Table):
    lease_s: v.Seconds | None = None
    heartbeat_s: v.Seconds | None = None
    sweep_interval_s: v.Seconds | None = None
    claim_interval_s: v.Seconds | None = None
    max_attempts: v.Positive | None = None
    max_recoveries: v.Count | None = None
    backoff_base_s: v.Seconds | None = None
    backoff_max_s: v.Seconds | None = None
    run_timeout_s: v.Seconds | None = None
    kill_grace_s: v.Seconds | None = None
    cancel_check_s: v.Seconds | None = None

    @model_validator(mode="after")
    def _order(self) -> Scheduler:
        d = s.SchedulerSettings
        lease, beat = self.lease_s or d.lease_s, self.heartbeat_s or d.heartbeat_s
        base, top = self.backoff_base_s or d.backoff_base_s, self.backoff_max_s or d.backoff_max_s
        if beat >= lease:
            raise v.keyed("heartbeat_s", f"must be less than lease_s ({lease:g})")
        if base > top:
            raise v.keyed("backoff_base_s", f"must not exceed backoff_max_s ({top:g})")
        return self


class Workspace(Table):
    fetch_debounce_s: v.Delay | None = None
    housekeeping_interval_s: v.Seconds | None = None
    high_watermark: Annotated[float, Field(gt=0, le=1)] | None = None
    low_watermark: Annotated[float, Field(gt=0, le=1)] | None = None
    capacity_bytes: v.Size | None = Field(default=None, validation_alias="capacity")
    git_timeout_s: Annotated[float, Field(gt=0, le=86400)] | None = None
    git_stall_s: Annotated[float, Field(gt=0, le=3600)] | None = None

    @model_validator(mode="after")
    def _order(self) -> Workspace:
        d = s.WorkspaceSettings
        low, high = self.low_watermark or d.low_watermark, self.high_watermark or d.high_watermark
        if not low < high:
            raise v.keyed(
                "low_watermark",
                f"must be less than high_watermark ({high:g}); "
                "need 0 < low_watermark < high_watermark <= 1",
            )
        return self


class Http(Table):
    listen: v.Listen | None = None
    api_token_env: v.EnvName | None = None
    api_token_file: v.FilePath | None = None
    read_token_env: v.EnvName | None = None
    read_token_file: v.FilePath | None = None
    public_url: v.HttpUrl | None = None
    allowed_hosts: list[str] | None = None
    webhook_listen: v.Listen | None = None
    max_webhook_body_bytes: v.Size | None = None


class Notify(Table):
    urls_env: v.EnvName | None = None
    urls_file: v.FilePath | None = None
    notify_success: bool | None = None
    retries: v.Count | None = None
    retry_delay_s: v.Delay | None = None


class Sandbox(Table):
    mode: Literal["bwrap", "none"] | None = None
    bwrap_path: v.FilePath | None = Field(default=None, validation_alias="bwrap")
    network: v.Network | None = None
    allow_hosts: list[v.Host] | None = None
    pass_env: list[v.SafeEnv] | None = None
    read_only_paths: list[v.FilePath] | None = None
    writable_paths: list[v.FilePath] | None = None
    hidden_paths: list[v.FilePath] | None = None


class Budgets(Table):
    default_max_run_usd: v.Usd | None = None
    default_daily_usd_per_repo: v.Usd | None = None


class History(Table):
    keep_events_days: Annotated[int, Field(ge=1, le=36500)] | None = None
    keep_runs_days: Annotated[int, Field(ge=1, le=36500)] | None = None

    @model_validator(mode="after")
    def _order(self) -> History:
        d = s.HistorySettings
        events, runs = (
            self.keep_events_days or d.keep_events_days,
            self.keep_runs_days or d.keep_runs_days,
        )
        if events > runs:
            raise v.keyed("keep_events_days", f"must not exceed keep_runs_days ({runs})")
        return self


class Tracker(Table):
    kind: Literal["github", "gitea", "forgejo", "gitlab", "local"]
    base_url: v.HttpUrl | None = None
    token_env: v.EnvName | None = None
    token_file: v.FilePath | None = None
    webhook_secret_env: v.EnvName | None = None
    webhook_secret_file: v.FilePath | None = None
    trusted_actors: list[v.Text] | None = None
    trust_write_permission: bool | None = None
    ready_label: v.Label | None = None
    working_label: v.Label | None = None
    blocked_label: v.Label | None = None
    poll_interval_s: v.Seconds | None = None
    poll_concurrency: v.Positive | None = None
    untrusted_text: Literal["omit", "quote"] | None = None
    resume_command: str | None = None  # "" turns the comment command off

    @model_validator(mode="after")
    def _base(self) -> Tracker:
        if self.base_url is None and self.kind in ("gitea", "forgejo", "gitlab"):
            raise v.keyed("base_url", "missing required value")
        return self


class AgentOptions(Table):
    """What an ``[agents.NAME]`` preset sets, and a repository's ``agent_options`` changes."""

    command: v.Command | None = None
    model: v.Text | None = None
    allowed_tools: list[v.Text] | None = None
    append_system_prompt: v.Text | None = None
    max_turns: Annotated[int, Field(ge=1, le=10**6)] | None = None
    max_budget_usd: v.Usd | None = None
    mcp_config: v.FilePath | None = None
    extra_args: v.Command | None = None
    api_key_env: v.EnvName | None = None
    api_key_file: v.FilePath | None = None
    api_key_var: v.EnvName | None = None
    env: dict[v.SafeEnv, str] | None = None
    idle_timeout_s: v.Seconds | None = None
    exit_grace_s: v.Delay | None = None
    network: v.Network | None = None
    allow_hosts: list[v.Host] | None = None
    pass_env: list[v.SafeEnv] | None = None
    price_input_usd_per_mtok: v.Usd | None = None
    price_cached_input_usd_per_mtok: v.Usd | None = None
    price_output_usd_per_mtok: v.Usd | None = None


class Agent(AgentOptions):
    kind: Literal["claude", "codex", "command"] | None = None


class CopyFile(Table):
    source: v.FilePath = Field(validation_alias="from")
    target: v.Relative = Field(validation_alias="to")


class Push(Table):
    mode: Literal["default-branch", "branch"] | None = None
    token_env: v.EnvName | None = None
    token_file: v.FilePath | None = None
    ssh_key_file: v.FilePath | None = None
    max_race_retries: v.Count | None = None
    conflict_agent_attempts: v.Count | None = None


class Ci(Table):
    kind: Literal["github", "gitea", "gitlab", "woodpecker", "none"] | None = None
    base_url: v.HttpUrl | None = None
    token_env: v.EnvName | None = None
    token_file: v.FilePath | None = None
    repo_id: v.RepoId | None = None
    appear_timeout_s: v.Seconds | None = None
    timeout_s: v.Seconds | None = None
    poll_interval_s: v.Seconds | None = None

    @model_validator(mode="after")
    def _woodpecker(self) -> Ci:
        for key in ("base_url", "repo_id"):
            if self.kind == "woodpecker" and getattr(self, key) is None:
                raise v.keyed(key, "missing required value")
        return self


class Probe(Table):
    kind: Literal["http", "command"]
    url: v.HttpUrl | None = None
    expect_status: Annotated[int, Field(ge=100, le=599)] | None = None
    body_regex: v.Regex | None = None
    json_field: v.Text | None = None
    command: v.Command | None = None
    timeout_s: v.Seconds | None = None

    @model_validator(mode="after")
    def _needs(self) -> Probe:
        key = "url" if self.kind == "http" else "command"
        if not getattr(self, key):
            raise v.keyed(key, "missing required value")
        return self


class Deploy(Table):
    probes: list[Probe] | None = None
    initial_delay_s: v.Delay | None = None
    interval_s: v.Seconds | None = None
    count: v.Positive | None = None
    failure_limit: v.Count | None = None
    progress_deadline_s: v.Seconds | None = None


class Repo(Table):
    tracker: v.Text
    slug: Annotated[
        str, v.check(re.compile(r"^[\w.-]+(/[\w.-]+)+$").match, "must look like owner/name")
    ]
    remote_url: Annotated[v.Text, AfterValidator(v.remote)] | None = None
    default_branch: v.Ref | None = None
    test_command: v.Text | None = None
    test_timeout_s: v.Seconds | None = None
    setup_commands: list[v.Text] | None = None
    workdir: v.Relative | None = None
    agent: v.Text | None = None
    agent_options: AgentOptions | None = None
    workspace: Literal["worktree", "clone"] | None = None
    git_crypt_key_env: v.EnvName | None = None
    git_crypt_key_file: v.FilePath | None = None
    keep_dirs: list[v.Text] | None = None
    copy_files: list[CopyFile] | None = None
    prompt_template: v.FilePath | None = None
    max_fix_iterations: v.Count | None = None
    max_fix_forwards: v.Count | None = None
    max_file_bytes: v.Size | None = None
    max_budget_usd: v.Usd | None = None
    daily_budget_usd: v.Usd | None = None
    run_timeout_s: v.Seconds | None = None
    review: bool | None = None
    push: Push = Push()
    ci: Ci = Ci()
    deploy: Deploy = Deploy()
    afk_toml: list[Literal["test_command", "setup_commands", "prompt", "deploy_probes"]] | None = (
        None
    )

    @model_validator(mode="after")
    def _git_crypt(self) -> Repo:
        keyed_by = self.git_crypt_key_env or self.git_crypt_key_file
        if keyed_by is not None and self.workspace != "clone":
            raise v.keyed(
                "git_crypt_key_env", 'needs workspace = "clone" (worktrees share the key)'
            )
        return self


class ConfigFile(Table):
    """The whole file (``pipeline config schema`` prints its JSON Schema)."""

    database_url: Annotated[v.Text, AfterValidator(v.database)] | None = None
    volume: v.FilePath | None = None
    log_level: Literal["debug", "info", "warning", "error"] | None = None
    log_format: Literal["text", "json"] | None = None
    max_concurrency: v.Positive | None = None
    max_queue_depth: Annotated[int, Field(ge=1, le=10**6)] | None = None
    poll_interval_s: v.Seconds | None = None
    run_migrations: bool | None = None
    scheduler: Scheduler = Scheduler()
    workspace: Workspace = Workspace()
    http: Http = Http()
    notify: Notify = Notify()
    sandbox: Sandbox = Sandbox()
    budgets: Budgets = Budgets()
    history: History = History()
    trackers: dict[v.Text, Tracker] = {}
    agents: dict[v.Text, Agent] = {}
    repos: dict[v.RepoName, Repo] = {}
