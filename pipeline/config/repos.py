"""Builder for ``[repos.NAME]`` tables and their push, ci and deploy sub-tables."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.config.reader import Table
from pipeline.config.sections import agent as agent_builder
from pipeline.config.sections import url
from pipeline.config.settings import (
    DEFAULT_KEEP_DIRS,
    AgentPreset,
    CiSettings,
    CopyFile,
    DeploySettings,
    ProbeSettings,
    PushSettings,
    RepoSettings,
    TrackerSettings,
)

PUSH_MODES = ("default-branch", "branch")
CI_KINDS = ("github", "gitea", "gitlab", "woodpecker", "none")
PROBE_KINDS = ("http", "command")
WORKSPACE_KINDS = ("worktree", "clone")
_SLUG = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")
_REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SCP_REMOTE = re.compile(r"^[\w.-]+@[\w.-]+:.+$")
_API_SUFFIX = re.compile(r"/api(/v\d+)?/?$")
# Option keys whose preset field has another name.
_OPTION_FIELDS = {"api_key_env": "api_key", "api_key_file": "api_key"}


@dataclass(frozen=True)
class RepoContext:
    """What a repository may refer to, and the defaults it inherits."""

    trackers: dict[str, TrackerSettings]
    agents: dict[str, AgentPreset]
    default_max_run_usd: float | None = None
    default_daily_usd: float | None = None


def web_base(api_url: str) -> str:
    """The forge's web address from its API address (``api.github.com`` -> ``github.com``)."""
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return f"{parts.scheme}://github.com"
    return _API_SUFFIX.sub("", api_url.rstrip("/"))


def repo(name: str, table: Table, ctx: RepoContext) -> RepoSettings:
    if not _REPO_NAME.match(name):
        table.problems.add(
            table.where,
            "a repository name may hold only letters, digits, "
            "'.', '_' and '-', starting with a letter or digit",
        )
    tracker = _tracker(table, ctx)
    slug = table.string("slug", required=True) or ""
    if slug and not _SLUG.match(slug):
        table.error("slug", f"must look like owner/name, got {slug!r}")
    workspace = table.choice("workspace", WORKSPACE_KINDS, "worktree") or "worktree"
    git_crypt_key = table.secret("git_crypt_key")
    if git_crypt_key.configured and workspace != "clone":
        table.error("git_crypt_key_env", 'needs workspace = "clone" (worktrees share the key)')
    agent_name = _agent(table, ctx)
    max_budget = table.optional_number("max_budget_usd")
    daily_budget = table.optional_number("daily_budget_usd")
    result = RepoSettings(
        name=name,
        tracker=tracker.name if tracker else "",
        slug=slug,
        remote_url=_remote_url(table, tracker, slug),
        default_branch=table.text("default_branch", "main"),
        test_command=table.string("test_command"),
        test_timeout_s=table.number("test_timeout_s", 900.0),
        setup_commands=table.strings("setup_commands"),
        workdir=table.relative("workdir", "."),
        agent=agent_name,
        agent_overrides=_overrides(table.table("agent_options"), ctx.agents.get(agent_name)),
        workspace=workspace,
        git_crypt_key=git_crypt_key,
        keep_dirs=table.strings("keep_dirs", DEFAULT_KEEP_DIRS),
        copy_files=tuple(_copy_file(t) for t in table.tables("copy_files")),
        prompt_template=table.path("prompt_template"),
        max_fix_iterations=table.integer("max_fix_iterations", 3, 0),
        max_fix_forwards=table.integer("max_fix_forwards", 2, 0),
        max_budget_usd=max_budget if max_budget is not None else ctx.default_max_run_usd,
        daily_budget_usd=daily_budget if daily_budget is not None else ctx.default_daily_usd,
        run_timeout_s=table.optional_number("run_timeout_s"),
        push=push(table.table("push")),
        ci=ci(table.table("ci")),
        deploy=deploy(table.table("deploy")),
    )
    table.finish()
    return result


def _tracker(table: Table, ctx: RepoContext) -> TrackerSettings | None:
    name = table.string("tracker", required=True)
    if name is None:
        return None
    found = ctx.trackers.get(name)
    if found is None:
        table.error(
            "tracker",
            f"names no defined tracker {name!r}; defined: {', '.join(sorted(ctx.trackers))}",
        )
    return found


def _agent(table: Table, ctx: RepoContext) -> str:
    name = table.string("agent") or "claude"
    if name not in ctx.agents:
        table.error(
            "agent",
            f"names no defined agent preset {name!r}; defined: {', '.join(sorted(ctx.agents))}",
        )
    return name


def _remote_url(table: Table, tracker: TrackerSettings | None, slug: str) -> str:
    # A tracker with an invalid kind (already reported) is "" and needs nothing more.
    needs = (
        tracker is not None
        and tracker.kind != ""
        and (tracker.kind == "local" or tracker.base_url is None)
    )
    value = table.string("remote_url", required=needs)
    if value is not None:
        return _check_remote(table, value)
    if tracker is None or tracker.base_url is None or not slug:
        return ""
    return f"{web_base(tracker.base_url)}/{slug}.git"


def _check_remote(table: Table, value: str) -> str:
    """Accept URLs, scp-like ``git@host:path`` and local paths (resolved to the file)."""
    if _SCP_REMOTE.match(value):
        return value
    parts = urlsplit(value)
    if parts.scheme in ("https", "http", "ssh", "git"):
        if not parts.hostname:
            table.error("remote_url", f"names no host: {value!r}")
        return value
    if parts.scheme == "file":
        return value
    if parts.scheme and len(parts.scheme) > 1:
        table.error(
            "remote_url",
            f"unsupported scheme {parts.scheme!r}; use https, ssh, "
            "file, git@host:path or a local path",
        )
        return value
    return str(table.resolve(value))


def _overrides(table: Table, preset: AgentPreset | None) -> tuple[tuple[str, object], ...]:
    """``[repos.NAME.agent_options]``: preset fields this repository changes.

    The options are read by the preset builder itself, so they get the same
    type checks, path resolution and messages as an ``[agents.NAME]`` table.
    """
    if "kind" in table.data:
        table.error(
            "kind", "cannot be changed per repository; define another preset and name it in `agent`"
        )
    kind = preset.kind if preset is not None else "claude"
    merged: dict[str, object] = {**table.data, "kind": kind}
    if kind == "command" and "command" not in table.data:
        # Satisfies the builder's "required" check; only keys the table sets are kept.
        merged["command"] = ["unchanged"]
    options = Table(merged, table.where, table.problems, table.base)
    built = agent_builder("options", options)
    fields = {_OPTION_FIELDS.get(key, key) for key in table.data if key != "kind"}
    names = {f.name for f in dataclasses.fields(AgentPreset)}
    return tuple((name, getattr(built, name)) for name in sorted(fields & names))


def _copy_file(table: Table) -> CopyFile:
    source = table.path("from")
    target = table.string("to", required=True)
    if source is None and not table.has("from"):
        table.error("from", "missing required value")
    if target is not None:
        target = table.check_relative("to", target)
    table.finish()
    return CopyFile(source=source or Path(), target=target or "")


def push(table: Table) -> PushSettings:
    defaults = PushSettings()
    result = PushSettings(
        mode=table.choice("mode", PUSH_MODES, defaults.mode) or defaults.mode,
        token=table.secret("token"),
        ssh_key_file=table.path("ssh_key_file"),
        max_race_retries=table.integer("max_race_retries", defaults.max_race_retries, 0),
        conflict_agent_attempts=table.integer(
            "conflict_agent_attempts", defaults.conflict_agent_attempts, 0
        ),
    )
    table.finish()
    return result


def ci(table: Table) -> CiSettings:
    defaults = CiSettings()
    kind = table.choice("kind", CI_KINDS, defaults.kind) or defaults.kind
    result = CiSettings(
        kind=kind,
        base_url=url(table, "base_url", required=kind == "woodpecker"),
        token=table.secret("token"),
        repo_id=_repo_id(table, required=kind == "woodpecker"),
        appear_timeout_s=table.number("appear_timeout_s", defaults.appear_timeout_s),
        timeout_s=table.number("timeout_s", defaults.timeout_s),
        poll_interval_s=table.number("poll_interval_s", defaults.poll_interval_s),
    )
    table.finish()
    return result


def _repo_id(table: Table, required: bool) -> str | None:
    if not table.has("repo_id"):
        if required:
            table.error("repo_id", "missing required value")
        return None
    value = table.data["repo_id"]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return table.string("repo_id")


def deploy(table: Table) -> DeploySettings:
    defaults = DeploySettings()
    result = DeploySettings(
        probes=tuple(probe(t) for t in table.tables("probes")),
        initial_delay_s=table.number("initial_delay_s", defaults.initial_delay_s, strict=False),
        interval_s=table.number("interval_s", defaults.interval_s),
        count=table.integer("count", defaults.count, 1),
        failure_limit=table.integer("failure_limit", defaults.failure_limit, 0),
        progress_deadline_s=table.number("progress_deadline_s", defaults.progress_deadline_s),
    )
    table.finish()
    return result


def probe(table: Table) -> ProbeSettings:
    kind = table.choice("kind", PROBE_KINDS, "http", required=True) or "http"
    command = table.command("command", required=kind == "command")
    result = ProbeSettings(
        kind=kind,
        url=url(table, "url", required=kind == "http"),
        expect_status=table.integer("expect_status", 200, 100, 599),
        body_regex=_regex(table, "body_regex"),
        json_field=table.string("json_field"),
        command=command,
        timeout_s=table.number("timeout_s", 30.0),
    )
    table.finish()
    return result


def _regex(table: Table, name: str) -> str | None:
    value = table.string(name)
    if value is None:
        return None
    try:
        re.compile(value)
    except re.error as exc:
        table.error(name, f"is not a valid regular expression: {exc}")
        return None
    return value
