"""Loading configuration: the example, defaults, overrides, paths and show/check."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tomllib
from pathlib import Path

import pytest

from pipeline.cli.config import check_command, show_command
from pipeline.config.load import ENV_VARS, load_settings
from pipeline.config.settings import (
    AgentPreset,
    CiSettings,
    CopyFile,
    DeploySettings,
    HistorySettings,
    HttpSettings,
    NotifySettings,
    ProbeSettings,
    PushSettings,
    RepoSettings,
    SandboxSettings,
    SchedulerSettings,
    SecretRef,
    Settings,
    TrackerSettings,
    WorkspaceSettings,
)
from pipeline.core.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "pipeline.example.toml"
SENTINEL = "sentinel-secret-5f2c9a"


def write(tmp_path: Path, text: str, name: str = "pipeline.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_example_loads_with_every_section() -> None:
    """The shipped example loads cleanly and fills every section."""
    settings = load_settings(EXAMPLE, environ={})
    assert {t.name for t in settings.trackers} == {"github", "local"}
    web = settings.repo("web")
    assert web is not None and web.ci.kind == "woodpecker"
    assert [p.kind for p in web.deploy.probes] == ["http", "command"]
    assert web.agent_overrides == (("max_turns", 100), ("model", "claude-opus-4-1"))
    aider = settings.agent("aider")
    assert aider is not None and "{prompt_file}" in aider.command
    assert settings.workspace.capacity_bytes == 50 * 2**30


def _option_keys() -> set[str]:
    """Config keys for every settings field (secrets as <key>_env, renamed fields mapped)."""
    renamed = {
        "capacity_bytes": "capacity",
        "listen_host": "listen",
        "listen_port": "listen",
        "agent_overrides": "agent_options",
        "source": "from",
        "target": "to",
        "bwrap_path": "bwrap",
    }
    skip = {
        "name",
        "trackers",
        "agents",
        "repos",
        "probes",
        "push",
        "ci",
        "deploy",
        "scheduler",
        "workspace",
        "http",
        "notify",
        "sandbox",
        "history",
        "repo_prompt",  # set by the repo's .afk.toml, never by the config file
    }
    keys: set[str] = set()
    classes = [
        Settings,
        SchedulerSettings,
        WorkspaceSettings,
        HttpSettings,
        TrackerSettings,
        AgentPreset,
        RepoSettings,
        PushSettings,
        CiSettings,
        DeploySettings,
        ProbeSettings,
        CopyFile,
        NotifySettings,
        SandboxSettings,
        HistorySettings,
    ]
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.name in skip or (cls is Settings and f.name == "source"):
                continue
            secret = "SecretRef" in str(f.type)
            keys.add(f"{f.name}_env" if secret else renamed.get(f.name, f.name))
    return keys | {"default_max_run_usd", "default_daily_usd_per_repo"}


def test_example_documents_every_option() -> None:
    """Every option of every section appears in the example, set or commented out."""
    text = EXAMPLE.read_text(encoding="utf-8")
    # `key = ...`, `# key = ...`, inside an inline table, or a `[...key]` header.
    pattern = r"^(# )?{0} = |{{ {0} = |, {0} = |\.{0}\]$"
    missing = [
        key
        for key in sorted(_option_keys())
        if not re.search(pattern.format(key), text, re.MULTILINE)
    ]
    assert missing == []


def test_no_file_gives_defaults_and_builtins(tmp_path: Path) -> None:
    """Without a file: SQLite under the data dir, the local tracker, claude and codex."""
    settings = load_settings(None, environ={"PIPELINE_DATA_DIR": str(tmp_path)})
    assert settings.database_url == f"sqlite:///{tmp_path / 'history.db'}"
    assert settings.volume == tmp_path / "volume"
    assert [t.name for t in settings.trackers] == ["local"]
    assert {a.name: a.kind for a in settings.agents} == {"claude": "claude", "codex": "codex"}


def test_pipeline_config_names_the_file(tmp_path: Path) -> None:
    """PIPELINE_CONFIG is read when no path is given."""
    path = write(tmp_path, "max_concurrency = 7\n")
    settings = load_settings(None, environ={"PIPELINE_CONFIG": str(path)})
    assert settings.max_concurrency == 7 and settings.source == path


def test_env_overrides_win_over_file(tmp_path: Path) -> None:
    """Every PIPELINE_* override replaces the value written in the file."""
    path = write(tmp_path, 'log_level = "info"\nmax_concurrency = 2\n[http]\nlisten = "[::]:1"\n')
    env = {
        "PIPELINE_DATABASE_URL": "postgresql://afk@db.internal:5432/afk",
        "PIPELINE_VOLUME": str(tmp_path / "vol"),
        "PIPELINE_LOG_LEVEL": "debug",
        "PIPELINE_LOG_FORMAT": "json",
        "PIPELINE_MAX_CONCURRENCY": "5",
        "PIPELINE_MAX_QUEUE_DEPTH": "9",
        "PIPELINE_POLL_INTERVAL_S": "2.5",
        "PIPELINE_HTTP_LISTEN": "127.0.0.1:9999",
        "PIPELINE_RUN_MIGRATIONS": "false",
    }
    s = load_settings(path, environ=env)
    assert (s.database_url, s.volume) == (env["PIPELINE_DATABASE_URL"], tmp_path / "vol")
    assert (s.log_level, s.log_format, s.max_concurrency) == ("debug", "json", 5)
    assert (s.max_queue_depth, s.poll_interval_s, s.run_migrations) == (9, 2.5, False)
    assert (s.http.listen_host, s.http.listen_port) == ("127.0.0.1", 9999)


def test_env_var_table_lists_every_override() -> None:
    """ENV_VARS documents each variable the loader reads."""
    from pipeline.config.load import _ENV

    assert set(_ENV) | {"PIPELINE_CONFIG", "PIPELINE_DATA_DIR"} == set(ENV_VARS)
    assert all(description for description in ENV_VARS.values())


def test_env_errors_name_the_variable(tmp_path: Path) -> None:
    """Bad overrides are reported by variable name, together with file problems."""
    path = write(tmp_path, "max_queue_depth = 0\n")
    env = {
        "PIPELINE_MAX_CONCURRENCY": "x",
        "PIPELINE_HTTP_LISTEN": "nowhere",
        "PIPELINE_LOG_FORMAT": "xml",
        "PIPELINE_DATABASE_URL": "mysql://h/db",
    }
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ=env)
    assert caught.value.problems == [
        "PIPELINE_DATABASE_URL: must start with sqlite:/// or postgresql://, got 'mysql://h/db'",
        "PIPELINE_LOG_FORMAT: must be one of text, json; got 'xml'",
        "PIPELINE_MAX_CONCURRENCY: must be an integer, got string 'x'",
        f"{path}:max_queue_depth: must be a number >= 1, got integer 0",
        "PIPELINE_HTTP_LISTEN: must be host:port with a port 0-65535, got 'nowhere'",
    ]


def test_relative_paths_resolve_against_the_file(tmp_path: Path) -> None:
    """Paths in the file are relative to the file's directory, not the cwd."""
    conf = tmp_path / "conf"
    conf.mkdir()
    path = write(
        conf,
        """
database_url = "sqlite:///state/history.db"
volume = "vol"
[trackers.gh]
kind = "github"
token_file = "secrets/gh"
[agents.claude]
mcp_config = "mcp.json"
[repos.notes]
tracker = "local"
slug = "me/notes"
remote_url = "../repos/notes.git"
prompt_template = "prompts/notes.md"
copy_files = [{ from = "files/env", to = "sub/.env" }]
""",
    )
    s = load_settings(path, environ={})
    assert s.database_url == f"sqlite:///{conf / 'state/history.db'}"
    assert s.volume == conf / "vol"
    tracker, agent, repo = s.tracker("gh"), s.agent("claude"), s.repo("notes")
    assert tracker is not None and tracker.token == SecretRef(file=conf / "secrets/gh")
    assert agent is not None and agent.mcp_config == conf / "mcp.json"
    assert repo is not None and repo.remote_url == str(conf / "../repos/notes.git")
    assert repo.prompt_template == conf / "prompts/notes.md"
    copied = repo.copy_files[0]
    assert (copied.source, copied.target) == (conf / "files/env", "sub/.env")


def test_remote_url_derives_from_the_tracker(tmp_path: Path) -> None:
    """Forge repositories default to <web base>/<slug>.git from the tracker's API URL."""
    path = write(
        tmp_path,
        """
[trackers.gh]
kind = "github"
[trackers.tea]
kind = "gitea"
base_url = "https://git.example.com/api/v1"
[repos.a]
tracker = "gh"
slug = "o/a"
[repos.b]
tracker = "tea"
slug = "o/b"
""",
    )
    s = load_settings(path, environ={})
    assert [r.remote_url for r in s.repos] == [
        "https://github.com/o/a.git",
        "https://git.example.com/o/b.git",
    ]


def test_budget_defaults_apply_to_repos_without_their_own(tmp_path: Path) -> None:
    """[budgets] fills max_budget_usd/daily_budget_usd only where a repo sets none."""
    path = write(
        tmp_path,
        """
[budgets]
default_max_run_usd = 4
default_daily_usd_per_repo = 40
[repos.a]
tracker = "local"
slug = "o/a"
remote_url = "a.git"
[repos.b]
tracker = "local"
slug = "o/b"
remote_url = "b.git"
max_budget_usd = 1.5
""",
    )
    s = load_settings(path, environ={})
    assert [(r.max_budget_usd, r.daily_budget_usd) for r in s.repos] == [(4.0, 40.0), (1.5, 40.0)]


def test_declared_preset_replaces_builtin(tmp_path: Path) -> None:
    """[agents.claude] replaces the built-in preset; its kind is implied by the name."""
    path = write(tmp_path, '[agents.claude]\nmodel = "m1"\ncommand = "npx claude"\n')
    agent = load_settings(path, environ={}).agent("claude")
    assert agent is not None
    assert (agent.kind, agent.model, agent.command) == ("claude", "m1", ("npx", "claude"))


def test_codex_prices_load_and_repos_may_change_them(tmp_path: Path) -> None:
    """Token prices are read for a codex preset; a repo's agent_options override them."""
    path = write(
        tmp_path,
        """
[agents.codex]
price_input_usd_per_mtok = 1.25
price_output_usd_per_mtok = 10
[repos.web]
tracker = "local"
slug = "o/web"
remote_url = "web.git"
agent = "codex"
[repos.web.agent_options]
price_cached_input_usd_per_mtok = 0.125
""",
    )
    settings = load_settings(path, environ={})
    codex = settings.agent("codex")
    assert codex is not None and codex.api_key_var == "CODEX_API_KEY"
    assert (
        codex.price_input_usd_per_mtok,
        codex.price_cached_input_usd_per_mtok,
        codex.price_output_usd_per_mtok,
    ) == (1.25, None, 10.0)
    web = settings.repo("web")
    assert web is not None
    assert web.agent_overrides == (("price_cached_input_usd_per_mtok", 0.125),)


@pytest.mark.parametrize(
    ("written", "size"),
    [('"10GiB"', 10 * 2**30), ('"500MB"', 500 * 10**6), ("4096", 4096), ('"1.5KiB"', 1536)],
)
def test_capacity_accepts_sizes(tmp_path: Path, written: str, size: int) -> None:
    """[workspace] capacity takes bytes or a size with a unit."""
    path = write(tmp_path, f"[workspace]\ncapacity = {written}\n")
    assert load_settings(path, environ={}).workspace.capacity_bytes == size


def test_webhook_body_limit_defaults_to_githubs_cap_and_takes_sizes(tmp_path: Path) -> None:
    """[http] max_webhook_body_bytes: 25 MiB by default (GitHub's cap), bytes or a size."""
    assert load_settings(write(tmp_path, ""), environ={}).http.max_webhook_body_bytes == 25 * 2**20
    path = write(tmp_path, '[http]\nmax_webhook_body_bytes = "1MiB"\n')
    assert load_settings(path, environ={}).http.max_webhook_body_bytes == 2**20
    path = write(tmp_path, "[http]\nmax_webhook_body_bytes = 0\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    assert "http.max_webhook_body_bytes: must be a positive byte count" in str(caught.value)


def test_check_prints_summary(tmp_path: Path) -> None:
    """check_command prints OK with counts and returns 0 (static: the file alone)."""
    out, err = io.StringIO(), io.StringIO()
    assert check_command(EXAMPLE, out, err, static=True) == 0
    assert out.getvalue() == f"OK: {EXAMPLE}: 2 trackers, 2 repos\n" and err.getvalue() == ""


def test_check_counts_one_of_each_in_the_singular(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[trackers.local]\nkind = "local"\n\n'
        '[repos.calc]\ntracker = "local"\nslug = "acme/calc"\n'
        f'remote_url = "{tmp_path}"\n',
    )
    out, err = io.StringIO(), io.StringIO()
    assert check_command(path, out, err, static=True) == 0, err.getvalue()
    assert out.getvalue() == f"OK: {path}: 1 tracker, 1 repo\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_show_never_prints_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """show writes secrets only as their references, redacts a database password; no leak."""
    (tmp_path / "key").write_text(SENTINEL, encoding="utf-8")
    path = write(
        tmp_path,
        """
[trackers.gh]
kind = "github"
token_env = "GITHUB_TOKEN"
webhook_secret_file = "key"
[notify]
urls_env = "NOTIFY_URLS"
[repos.a]
tracker = "gh"
slug = "o/a"
""",
    )
    for name in ("GITHUB_TOKEN", "NOTIFY_URLS"):
        monkeypatch.setenv(name, SENTINEL)
    monkeypatch.setenv("PIPELINE_DATABASE_URL", f"postgresql://afk:{SENTINEL}@db/afk")
    out, err = io.StringIO(), io.StringIO()
    assert show_command(path, out, err, as_json=as_json) == 0
    text = out.getvalue()
    assert SENTINEL not in text and err.getvalue() == ""
    parsed = json.loads(text) if as_json else tomllib.loads(text)
    assert parsed["database_url"] == "postgresql://afk:***@db/afk"
    tracker = parsed["trackers"]["gh"]
    assert tracker["token_env"] == "GITHUB_TOKEN"
    assert tracker["webhook_secret_file"] == str(tmp_path / "key")


def test_show_reports_problems_like_check(tmp_path: Path) -> None:
    """show returns 2 and prints the problems when the file is invalid."""
    path = write(tmp_path, "max_concurrency = 0\n")
    out, err = io.StringIO(), io.StringIO()
    assert show_command(path, out, err) == 2
    assert out.getvalue() == ""
    assert err.getvalue() == f"{path}:max_concurrency: must be a number >= 1, got integer 0\n"


def test_untrusted_text_defaults_to_omit_and_accepts_quote(tmp_path: Path) -> None:
    """``untrusted_text`` is omit unless set; quote is accepted; anything else is named."""
    base = '[trackers.gh]\nkind = "github"\n'
    settings = load_settings(write(tmp_path, base), environ={})
    assert settings.tracker("gh").untrusted_text == "omit"  # type: ignore[union-attr]
    quoted = load_settings(write(tmp_path, base + 'untrusted_text = "quote"\n'), environ={})
    assert quoted.tracker("gh").untrusted_text == "quote"  # type: ignore[union-attr]
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, base + 'untrusted_text = "show"\n'), environ={})
    assert "trackers.gh.untrusted_text" in str(caught.value) and "omit, quote" in str(caught.value)


def test_history_retention_defaults_and_order(tmp_path: Path) -> None:
    """[history]: 90 and 365 days unless set; events kept longer than runs is refused."""
    defaults = load_settings(write(tmp_path, ""), environ={}).history
    assert (defaults.keep_events_days, defaults.keep_runs_days) == (90, 365)
    path = write(tmp_path, "[history]\nkeep_events_days = 7\nkeep_runs_days = 30\n")
    assert load_settings(path, environ={}).history == HistorySettings(7, 30)
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, "[history]\nkeep_events_days = 400\n"), environ={})
    assert "history.keep_events_days: must not exceed keep_runs_days (365)" in str(caught.value)
