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

from pipeline.config.values import (
    Command,
    Count,
    Delay,
    EnvName,
    FilePath,
    Host,
    HttpUrl,
    Label,
    Network,
    Positive,
    Ref,
    Regex,
    Relative,
    RepoId,
    RepoName,
    SafeEnv,
    Seconds,
    Size,
    Text,
    Usd,
    check,
    database,
    keyed,
    parse_listen,
    remote,
)


class Table(BaseModel):
    """A TOML table: unknown keys, wrong types and non-finite numbers are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class Scheduler(Table):
    lease_s: Seconds | None = None
    heartbeat_s: Seconds | None = None
    sweep_interval_s: Seconds | None = None
    claim_interval_s: Seconds | None = None
    max_attempts: Positive | None = None
    max_recoveries: Count | None = None
    backoff_base_s: Seconds | None = None
    backoff_max_s: Seconds | None = None
    run_timeout_s: Seconds | None = None
    kill_grace_s: Seconds | None = None
    cancel_check_s: Seconds | None = None

    @model_validator(mode="after")
    def _order(self) -> Scheduler:
        lease, beat = self.lease_s or 60.0, self.heartbeat_s or 10.0
        base, top = self.backoff_base_s or 10.0, self.backoff_max_s or 600.0
        if beat >= lease:
            raise keyed("heartbeat_s", f"must be less than lease_s ({lease:g})")
        if base > top:
            raise keyed("backoff_base_s", f"must not exceed backoff_max_s ({top:g})")
        return self


class Workspace(Table):
    fetch_debounce_s: Delay | None = None
    housekeeping_interval_s: Seconds | None = None
    high_watermark: Annotated[float, Field(gt=0, le=1)] | None = None
    low_watermark: Annotated[float, Field(gt=0, le=1)] | None = None
    capacity_bytes: Size | None = Field(default=None, validation_alias="capacity")

    @model_validator(mode="after")
    def _order(self) -> Workspace:
        low, high = self.low_watermark or 0.8, self.high_watermark or 0.9
        if not low < high:
            raise keyed(
                "low_watermark",
                f"must be less than high_watermark ({high:g}); "
                "need 0 < low_watermark < high_watermark <= 1",
            )
        return self


class Http(Table):
    listen: Annotated[str, check(parse_listen, "must be host:port with a port 0-65535")] | None = (
        None
    )
    api_token_env: EnvName | None = None
    api_token_file: FilePath | None = None
    max_webhook_body_bytes: Size | None = None


class Notify(Table):
    urls_env: EnvName | None = None
    urls_file: FilePath | None = None
    notify_success: bool | None = None
    retries: Count | None = None
    retry_delay_s: Delay | None = None


class Sandbox(Table):
    mode: Literal["bwrap", "none"] | None = None
    bwrap_path: FilePath | None = Field(default=None, validation_alias="bwrap")
    network: Network | None = None
    allow_hosts: list[Host] | None = None
    pass_env: list[SafeEnv] | None = None
    read_only_paths: list[FilePath] | None = None
    writable_paths: list[FilePath] | None = None
    hidden_paths: list[FilePath] | None = None


class Budgets(Table):
    default_max_run_usd: Usd | None = None
    default_daily_usd_per_repo: Usd | None = None


class Tracker(Table):
    kind: Literal["github", "gitea", "forgejo", "gitlab", "local"]
    base_url: HttpUrl | None = None
    token_env: EnvName | None = None
    token_file: FilePath | None = None
    webhook_secret_env: EnvName | None = None
    webhook_secret_file: FilePath | None = None
    trusted_actors: list[Text] | None = None
    trust_write_permission: bool | None = None
    ready_label: Label | None = None
    working_label: Label | None = None
    blocked_label: Label | None = None
    poll_interval_s: Seconds | None = None
    untrusted_text: Literal["omit", "quote"] | None = None

    @model_validator(mode="after")
    def _base(self) -> Tracker:
        if self.base_url is None and self.kind in ("gitea", "forgejo", "gitlab"):
            raise keyed("base_url", "missing required value")
        return self


class AgentOptions(Table):
    """What an ``[agents.NAME]`` preset sets, and a repository's ``agent_options`` changes."""

    command: Command | None = None
    model: Text | None = None
    allowed_tools: list[Text] | None = None
    append_system_prompt: Text | None = None
    max_turns: Annotated[int, Field(ge=1, le=10**6)] | None = None
    max_budget_usd: Usd | None = None
    mcp_config: FilePath | None = None
    extra_args: Command | None = None
    api_key_env: EnvName | None = None
    api_key_file: FilePath | None = None
    api_key_var: EnvName | None = None
    env: dict[SafeEnv, str] | None = None
    idle_timeout_s: Seconds | None = None
    exit_grace_s: Delay | None = None
    network: Network | None = None
    allow_hosts: list[Host] | None = None
    pass_env: list[SafeEnv] | None = None
    price_input_usd_per_mtok: Usd | None = None
    price_cached_input_usd_per_mtok: Usd | None = None
    price_output_usd_per_mtok: Usd | None = None


class Agent(AgentOptions):
    kind: Literal["claude", "codex", "command"] | None = None


class CopyFile(Table):
    source: FilePath = Field(validation_alias="from")
    target: Relative = Field(validation_alias="to")


class Push(Table):
    mode: Literal["default-branch", "branch"] | None = None
    token_env: EnvName | None = None
    token_file: FilePath | None = None
    ssh_key_file: FilePath | None = None
    max_race_retries: Count | None = None
    conflict_agent_attempts: Count | None = None


class Ci(Table):
    kind: Literal["github", "gitea", "gitlab", "woodpecker", "none"] | None = None
    base_url: HttpUrl | None = None
    token_env: EnvName | None = None
    token_file: FilePath | None = None
    repo_id: RepoId | None = None
    appear_timeout_s: Seconds | None = None
    timeout_s: Seconds | None = None
    poll_interval_s: Seconds | None = None

    @model_validator(mode="after")
    def _woodpecker(self) -> Ci:
        for key in ("base_url", "repo_id"):
            if self.kind == "woodpecker" and getattr(self, key) is None:
                raise keyed(key, "missing required value")
        return self


class Probe(Table):
    kind: Literal["http", "command"]
    url: HttpUrl | None = None
    expect_status: Annotated[int, Field(ge=100, le=599)] | None = None
    body_regex: Regex | None = None
    json_field: Text | None = None
    command: Command | None = None
    timeout_s: Seconds | None = None

    @model_validator(mode="after")
    def _needs(self) -> Probe:
        key = "url" if self.kind == "http" else "command"
        if not getattr(self, key):
            raise keyed(key, "missing required value")
        return self


class Deploy(Table):
    probes: list[Probe] | None = None
    initial_delay_s: Delay | None = None
    interval_s: Seconds | None = None
    count: Positive | None = None
    failure_limit: Count | None = None
    progress_deadline_s: Seconds | None = None


class Repo(Table):
    tracker: Text
    slug: Annotated[
        str, check(re.compile(r"^[\w.-]+(/[\w.-]+)+$").match, "must look like owner/name")
    ]
    remote_url: Annotated[Text, AfterValidator(remote)] | None = None
    default_branch: Ref | None = None
    test_command: Text | None = None
    test_timeout_s: Seconds | None = None
    setup_commands: list[Text] | None = None
    workdir: Relative | None = None
    agent: Text | None = None
    agent_options: AgentOptions | None = None
    workspace: Literal["worktree", "clone"] | None = None
    git_crypt_key_env: EnvName | None = None
    git_crypt_key_file: FilePath | None = None
    keep_dirs: list[Text] | None = None
    copy_files: list[CopyFile] | None = None
    prompt_template: FilePath | None = None
    max_fix_iterations: Count | None = None
    max_fix_forwards: Count | None = None
    max_budget_usd: Usd | None = None
    daily_budget_usd: Usd | None = None
    run_timeout_s: Seconds | None = None
    push: Push = Push()
    ci: Ci = Ci()
    deploy: Deploy = Deploy()

    @model_validator(mode="after")
    def _git_crypt(self) -> Repo:
        keyed_by = self.git_crypt_key_env or self.git_crypt_key_file
        if keyed_by is not None and self.workspace != "clone":
            raise keyed("git_crypt_key_env", 'needs workspace = "clone" (worktrees share the key)')
        return self


class ConfigFile(Table):
    """The whole file (``pipeline config schema`` prints its JSON Schema)."""

    database_url: Annotated[Text, AfterValidator(database)] | None = None
    volume: FilePath | None = None
    log_level: Literal["debug", "info", "warning", "error"] | None = None
    log_format: Literal["text", "json"] | None = None
    max_concurrency: Positive | None = None
    max_queue_depth: Annotated[int, Field(ge=1, le=10**6)] | None = None
    poll_interval_s: Seconds | None = None
    run_migrations: bool | None = None
    scheduler: Scheduler = Scheduler()
    workspace: Workspace = Workspace()
    http: Http = Http()
    notify: Notify = Notify()
    sandbox: Sandbox = Sandbox()
    budgets: Budgets = Budgets()
    trackers: dict[Text, Tracker] = {}
    agents: dict[Text, Agent] = {}
    repos: dict[RepoName, Repo] = {}
