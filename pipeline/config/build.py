"""Validated file models into frozen settings: defaults, built-ins and cross-references.

A model holds only what the file sets; every field it leaves ``None`` takes the
settings dataclass's default. What needs more than one table (a repository's
tracker and agent, budgets, the remote derived from the tracker) is checked here
and reported as ``(key.path, problem)``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel

from pipeline.config import models as m
from pipeline.config import settings as s
from pipeline.config.values import parse_listen

T = TypeVar("T")
Problems = list[tuple[str, str]]
GITHUB_API = "https://api.github.com"
BUILTIN_AGENTS = {
    "claude": s.AgentPreset(name="claude", kind="claude", command=("claude",)),
    # `codex exec` reads the key for OpenAI's own API from CODEX_API_KEY.
    "codex": s.AgentPreset(
        name="codex", kind="codex", command=("codex",), api_key_var="CODEX_API_KEY"
    ),
}
_PRICES = (
    "price_input_usd_per_mtok",
    "price_cached_input_usd_per_mtok",
    "price_output_usd_per_mtok",
)


def values(cls: type[Any], model: BaseModel) -> dict[str, Any]:
    """The fields of settings class ``cls`` that ``model`` sets.

    A ``SecretRef`` field ``x`` comes from the model's ``x_env`` and ``x_file``;
    arrays become tuples and tables sorted ``(key, value)`` pairs.
    """
    found: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.default_factory is s.SecretRef:
            env, file = getattr(model, f"{field.name}_env"), getattr(model, f"{field.name}_file")
            found[field.name] = s.SecretRef(env=env, file=file)
        elif getattr(model, field.name, None) is not None:
            found[field.name] = _plain(getattr(model, field.name))
    return found


def fill(cls: type[T], model: BaseModel, **extra: Any) -> T:
    """A ``cls`` with what ``model`` sets, ``extra`` on top, defaults for the rest."""
    return cls(**(values(cls, model) | extra))


def _listen(raw: str | None) -> tuple[str, int] | None:
    return None if raw is None else parse_listen(raw)


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    return value


def web_base(api_url: str) -> str:
    """The forge's web address from its API address (``api.github.com`` -> ``github.com``)."""
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return f"{parts.scheme}://github.com"
    return re.sub(r"/api(/v\d+)?/?$", "", api_url.rstrip("/"))


def build(
    file: m.ConfigFile, source: Path | None, data_dir: Path, problems: Problems
) -> s.Settings:
    """Settings from a valid file; defaults for what it leaves out."""
    http = fill(s.HttpSettings, file.http, webhook_listen=_listen(file.http.webhook_listen))
    http = dataclasses.replace(
        http,
        allowed_hosts=tuple(h.lower() for h in http.allowed_hosts),
        public_url=http.public_url.rstrip("/") if http.public_url else None,
    )
    if file.http.listen is not None:
        host, port = parse_listen(file.http.listen) or (http.listen_host, http.listen_port)
        http = dataclasses.replace(http, listen_host=host, listen_port=port)
    trackers = {"local": s.TrackerSettings(name="local", kind="local")}
    for name, tracker in file.trackers.items():
        base_url = tracker.base_url or (GITHUB_API if tracker.kind == "github" else None)
        trackers[name] = fill(s.TrackerSettings, tracker, name=name, base_url=base_url)
    agents = dict(BUILTIN_AGENTS)
    for name, agent in file.agents.items():
        agents[name] = _agent(name, agent, f"agents.{name}", problems)
    repos = [_repo(n, r, file, trackers, agents, problems) for n, r in file.repos.items()]
    return fill(
        s.Settings,
        file,
        source=source,
        database_url=file.database_url or f"sqlite:///{data_dir / 'history.db'}",
        volume=file.volume or data_dir / "volume",
        scheduler=fill(s.SchedulerSettings, file.scheduler),
        workspace=fill(s.WorkspaceSettings, file.workspace),
        http=http,
        notify=fill(s.NotifySettings, file.notify),
        sandbox=fill(s.SandboxSettings, file.sandbox),
        history=fill(s.HistorySettings, file.history),
        trackers=tuple(trackers.values()),
        agents=tuple(agents.values()),
        repos=tuple(repos),
    )


def _agent(
    name: str,
    model: m.AgentOptions,
    where: str,
    problems: Problems,
    base: s.AgentPreset | None = None,
) -> s.AgentPreset:
    """A preset (``base`` None: ``model`` is an ``[agents.NAME]`` table) or a changed one."""
    if base is None:
        kind = getattr(model, "kind", None) or (name if name in BUILTIN_AGENTS else None)
        if kind is None:
            problems.append((f"{where}.kind", "missing required value"))
        base = BUILTIN_AGENTS.get(kind or "", s.AgentPreset(name=name, kind=kind or "command"))
    command = model.command or list(base.command)
    if base.kind == "command":
        if not command:
            problems.append((f"{where}.command", "missing required value"))
        _placeholders(command, f"{where}.command", problems)
    for price in _PRICES:
        if getattr(model, price) is not None and base.kind != "codex":
            why = f"a {base.kind} agent's cost is not computed from token prices"
            problems.append((f"{where}.{price}", f'only for kind = "codex" ({why})'))
    return dataclasses.replace(base, **values(s.AgentPreset, model), name=name)


def _placeholders(command: list[str], where: str, problems: Problems) -> None:
    for word in command:
        for found in re.findall(r"\{([^{}]*)\}", word):
            if found not in ("prompt_file", "workdir"):
                allowed = "allowed: {prompt_file}, {workdir}"
                problems.append((where, f"unknown placeholder {{{found}}}; {allowed}"))


def _lookup(table: dict[str, T], name: str, what: str, where: str, problems: Problems) -> T | None:
    if name not in table:
        problems.append(
            (where, f"names no defined {what} {name!r}; defined: {', '.join(sorted(table))}")
        )
    return table.get(name)


def _repo(
    name: str,
    repo: m.Repo,
    file: m.ConfigFile,
    trackers: dict[str, s.TrackerSettings],
    agents: dict[str, s.AgentPreset],
    problems: Problems,
) -> s.RepoSettings:
    where = f"repos.{name}"
    tracker = _lookup(trackers, repo.tracker, "tracker", f"{where}.tracker", problems)
    preset = _lookup(agents, repo.agent or "claude", "agent preset", f"{where}.agent", problems)
    remote = repo.remote_url
    if remote is None and tracker is not None:
        if tracker.kind == "local" or tracker.base_url is None:
            problems.append((f"{where}.remote_url", "missing required value"))
        else:
            remote = f"{web_base(tracker.base_url)}/{repo.slug}.git"
    budgets = file.budgets
    return fill(
        s.RepoSettings,
        repo,
        name=name,
        remote_url=remote or "",
        agent_overrides=_overrides(repo.agent_options, preset, f"{where}.agent_options", problems),
        copy_files=tuple(fill(s.CopyFile, c) for c in repo.copy_files or ()),
        max_budget_usd=_first(repo.max_budget_usd, budgets.default_max_run_usd),
        daily_budget_usd=_first(repo.daily_budget_usd, budgets.default_daily_usd_per_repo),
        push=fill(s.PushSettings, repo.push),
        ci=fill(s.CiSettings, repo.ci),
        deploy=fill(
            s.DeploySettings,
            repo.deploy,
            probes=tuple(fill(s.ProbeSettings, p) for p in repo.deploy.probes or ()),
        ),
    )


def _first(value: float | None, default: float | None) -> float | None:
    return value if value is not None else default


def _overrides(
    options: m.AgentOptions | None, preset: s.AgentPreset | None, where: str, problems: Problems
) -> tuple[tuple[str, object], ...]:
    """``[repos.NAME.agent_options]``: the preset fields this repository changes."""
    if options is None:
        return ()
    base = preset or BUILTIN_AGENTS["claude"]
    built = _agent(base.name, options, where, problems, base)
    keys = {
        "api_key" if k in ("api_key_env", "api_key_file") else k for k in options.model_fields_set
    }
    return tuple((key, getattr(built, key)) for key in sorted(keys))
