"""The steps of loading that need more than one table: built-ins, derived values, references.

Each table validates itself (``pipeline.config.settings``); the built-in tracker and
agents, a repository's tracker and agent, the remote derived from the tracker and
what an agent's kind allows are added or checked here, problems as ``(key.path, problem)``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import TypeVar
from urllib.parse import urlsplit

from pipeline.config import settings as s
from pipeline.config.presets import BUILTIN_AGENTS

T = TypeVar("T")
Problems = list[tuple[str, str]]
GITHUB_API = "https://api.github.com"
LOCAL = s.TrackerSettings(name="local", kind="local")
_PRICES = (
    "price_input_usd_per_mtok",
    "price_cached_input_usd_per_mtok",
    "price_output_usd_per_mtok",
)


def web_base(api_url: str) -> str:
    """The forge's web address from its API address (``api.github.com`` -> ``github.com``)."""
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return f"{parts.scheme}://github.com"
    return re.sub(r"/api(/v\d+)?/?$", "", api_url.rstrip("/"))


def build(settings: s.Settings, problems: Problems) -> s.Settings:
    """The validated file with built-ins and derived values; cross-table problems noted."""
    trackers = {t.name: t for t in (LOCAL, *settings.trackers)}
    for name, tracker in trackers.items():
        if tracker.kind == "github" and tracker.base_url is None:
            trackers[name] = dataclasses.replace(tracker, base_url=GITHUB_API)
    agents = {a.name: a for a in (*BUILTIN_AGENTS.values(), *settings.agents)}
    for agent in settings.agents:
        if not agent.kind:
            problems.append((f"agents.{agent.name}.kind", "missing required value"))
            agent = dataclasses.replace(agent, kind="command")
        prices = {price: getattr(agent, price) for price in _PRICES}
        _check(agent, prices, f"agents.{agent.name}", problems)
    repos = [_repo(repo, trackers, agents, problems) for repo in settings.repos]
    _one_table_a_repository(repos, problems)
    return dataclasses.replace(
        settings,
        trackers=tuple(trackers.values()),
        agents=tuple(agents.values()),
        repos=tuple(repos),
    )


def _check(
    agent: s.AgentPreset, prices: Mapping[str, object], where: str, problems: Problems
) -> None:
    """What a preset's kind needs (a command) and allows (token prices: codex only)."""
    if agent.kind == "command":
        if not agent.command:
            problems.append((f"{where}.command", "missing required value"))
        for word in agent.command:
            for found in re.findall(r"\{([^{}]*)\}", word):
                if found not in ("prompt_file", "workdir"):
                    allowed = "allowed: {prompt_file}, {workdir}"
                    problems.append(
                        (f"{where}.command", f"unknown placeholder {{{found}}}; {allowed}")
                    )
    for price in _PRICES:
        if prices.get(price) is not None and agent.kind != "codex":
            why = f"a {agent.kind} agent's cost is not computed from token prices"
            problems.append((f"{where}.{price}", f'only for kind = "codex" ({why})'))


def _one_table_a_repository(repos: list[s.RepoSettings], problems: Problems) -> None:
    """Two tables naming one repository would share its checkout, its queue in neither."""
    first: dict[tuple[str, str], str] = {}
    for repo in repos:
        other = first.setdefault((repo.tracker, repo.slug.casefold()), repo.name)
        if other != repo.name:
            problems.append(
                (
                    f"repos.{repo.name}.slug",
                    f"{repo.slug!r} on tracker {repo.tracker!r} is already repos.{other}; "
                    "one repository is one [repos.NAME] table (its runs share one checkout "
                    "and one issue list)",
                )
            )


def _lookup(table: dict[str, T], name: str, what: str, where: str, problems: Problems) -> T | None:
    if name not in table:
        problems.append(
            (where, f"names no defined {what} {name!r}; defined: {', '.join(sorted(table))}")
        )
    return table.get(name)


def _repo(
    repo: s.RepoSettings,
    trackers: dict[str, s.TrackerSettings],
    agents: dict[str, s.AgentPreset],
    problems: Problems,
) -> s.RepoSettings:
    where = f"repos.{repo.name}"
    tracker = _lookup(trackers, repo.tracker, "tracker", f"{where}.tracker", problems)
    preset = _lookup(agents, repo.agent, "agent preset", f"{where}.agent", problems)
    remote = repo.remote_url
    if not remote and tracker is not None:
        if tracker.kind == "local" or tracker.base_url is None:
            problems.append((f"{where}.remote_url", "missing required value"))
        else:
            remote = f"{web_base(tracker.base_url)}/{repo.slug}.git"
    if repo.agent_overrides:
        changed = dict(repo.agent_overrides)
        base = dataclasses.replace(preset or BUILTIN_AGENTS["claude"], **changed)  # type: ignore[arg-type]
        _check(base, changed, f"{where}.agent_options", problems)
    return dataclasses.replace(repo, remote_url=remote)
