"""The settings classes are the file's tables: what the loader fills in is no key of the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline.config.load import load_settings
from pipeline.config.settings import AgentPreset, RepoSettings, SecretRef, TrackerSettings
from pipeline.core.errors import ConfigError

REPO = '[repos.web]\ntracker = "local"\nslug = "o/web"\nremote_url = "web.git"\n'


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    return [p.removeprefix(f"{path}:") for p in caught.value.problems]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[trackers.t]\nkind = "github"\nname = "u"\n', "trackers.t.name: unknown key"),
        (REPO + 'name = "other"\n', "repos.web.name: unknown key"),
        (REPO + 'repo_prompt = "p"\n', "repos.web.repo_prompt: unknown key"),
        ('source = "x.toml"\n', "source: unknown key"),
        (
            '[http]\nlisten_host = "0.0.0.0"\n',
            "http.listen_host: unknown key; did you mean 'listen'?",
        ),
        (
            REPO + '[repos.web.agent_options]\nkind = "codex"\n',
            "repos.web.agent_options.kind: unknown key",
        ),
        ('[trackers.t]\nkind = "github"\n"\\u0000name" = "u"\n', "trackers.t.\0name: unknown key"),
        ('[http]\nread_token_file = ""\n', "http.read_token_file: must be a non-empty path string"),
    ],
)
def test_keys_the_loader_fills_in_are_refused(tmp_path: Path, text: str, line: str) -> None:
    """Names, the source, listen parts, a repo's prompt and an options' kind come from elsewhere."""
    assert problems(tmp_path, text) == [line]


def test_an_agent_without_kind_reports_every_problem_of_its_table(tmp_path: Path) -> None:
    """A kind is needed unless the name is a built-in; without one the agent runs a command."""
    found = problems(tmp_path, '[agents.a]\nmodel = "m"\n[agents.b]\nkind = "command"\n')
    assert found == [
        "agents.a.kind: missing required value",
        "agents.a.command: missing required value",
        "agents.b.command: missing required value",
    ]


def test_loaded_settings_equal_ones_built_in_code(tmp_path: Path) -> None:
    """The file's tables load into the same frozen values code constructs and replaces."""
    path = tmp_path / "p.toml"
    path.write_text(
        '[budgets]\ndefault_max_run_usd = 2\n[trackers.gh]\nkind = "github"\ntoken_env = "GH"\n'
        '[agents.codex]\nmodel = "m"\n[repos.web]\ntracker = "gh"\nslug = "o/web"\n'
        'agent = "codex"\n[repos.web.agent_options]\napi_key_env = "K"\nallowed_tools = ["Read"]\n',
        encoding="utf-8",
    )
    settings = load_settings(path, environ={"PIPELINE_DATA_DIR": str(tmp_path)})
    assert settings.tracker("gh") == TrackerSettings(
        name="gh", kind="github", base_url="https://api.github.com", token=SecretRef(env="GH")
    )
    codex = AgentPreset(
        name="codex", kind="codex", command=("codex",), api_key_var="CODEX_API_KEY", model="m"
    )
    assert settings.agent("codex") == codex
    repo = RepoSettings(
        name="web",
        tracker="gh",
        slug="o/web",
        remote_url="https://github.com/o/web.git",
        agent="codex",
        agent_overrides=(("allowed_tools", ("Read",)), ("api_key", SecretRef(env="K"))),
        max_budget_usd=2.0,
    )
    assert settings.repo("web") == repo
    assert dataclasses.replace(repo, max_budget_usd=None).max_budget_usd is None
    assert dataclasses.replace(settings, repos=()).repos == ()
