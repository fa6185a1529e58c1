"""Configuration problems: each is one exact ``FILE:key: problem`` line and exit 2."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli.config import check_command
from pipeline.config.load import load_settings
from pipeline.core.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "pipeline.example.toml"
REPO = '[repos.web]\ntracker = "local"\nslug = "o/web"\nremote_url = "web.git"\n'
SECRET_HINT = (
    "secrets must not be written in the file; put it in an environment variable "
    "and set {0}_env, or in a file and set {0}_file"
)

CASES: list[tuple[str, str, str]] = [
    (
        "wrong type",
        REPO + "test_command = 3\n",
        "repos.web.test_command: must be a string, got integer 3",
    ),
    (
        "wrong type bool",
        'run_migrations = "yes"\n',
        "run_migrations: must be a boolean (true or false), got string 'yes'",
    ),
    (
        "unknown key",
        "max_concurency = 3\n",
        "max_concurency: unknown key; did you mean 'max_concurrency'?",
    ),
    (
        "unknown nested key",
        REPO + '[repos.web.push]\nmod = "branch"\n',
        "repos.web.push.mod: unknown key; did you mean 'mode'?",
    ),
    (
        "unknown agent option",
        REPO + '[repos.web.agent_options]\nmodle = "m"\n',
        "repos.web.agent_options.modle: unknown key; did you mean 'model'?",
    ),
    (
        "missing required",
        '[repos.web]\ntracker = "local"\nremote_url = "w.git"\n',
        "repos.web.slug: missing required value",
    ),
    (
        "one repository in two tables",
        REPO + '[repos.web2]\ntracker = "local"\nslug = "O/Web"\nremote_url = "w.git"\n',
        "repos.web2.slug: 'O/Web' on tracker 'local' is already repos.web; one repository "
        "is one [repos.NAME] table (its runs share one checkout and one issue list)",
    ),
    (
        "missing remote for local",
        '[repos.web]\ntracker = "local"\nslug = "o/w"\n',
        "repos.web.remote_url: missing required value",
    ),
    (
        "missing forge base",
        '[trackers.t]\nkind = "gitlab"\n',
        "trackers.t.base_url: missing required value",
    ),
    (
        "bad url",
        '[trackers.t]\nkind = "gitea"\nbase_url = "git.example.com"\n',
        "trackers.t.base_url: must be a https or http URL with a host, got 'git.example.com'",
    ),
    (
        "bad probe url",
        REPO + '[[repos.web.deploy.probes]]\nkind = "http"\nurl = "https://"\n',
        "repos.web.deploy.probes[0].url: must be a https or http URL with a host, got 'https://'",
    ),
    (
        "bad database url",
        'database_url = "mysql://db/x"\n',
        "database_url: must start with sqlite:/// or postgresql://, got 'mysql://db/x'",
    ),
    (
        "database password",
        'database_url = "postgresql://u:pw@db/x"\n',
        "database_url: must not carry a password in the file; set PIPELINE_DATABASE_URL "
        "or use a ~/.pgpass file",
    ),
    ("bad enum", 'log_format = "xml"\n', "log_format: must be one of text, json; got 'xml'"),
    (
        "bad enum suggestion",
        '[trackers.t]\nkind = "gitub"\n',
        "trackers.t.kind: must be one of github, gitea, forgejo, gitlab, local; got 'gitub'; "
        "did you mean 'github'?",
    ),
    (
        "zero concurrency",
        "max_concurrency = 0\n",
        "max_concurrency: must be a number >= 1, got integer 0",
    ),
    (
        "watermarks order",
        "[workspace]\nlow_watermark = 0.9\nhigh_watermark = 0.8\n",
        "workspace.low_watermark: must be less than high_watermark (0.8); "
        "need 0 < low_watermark < high_watermark <= 1",
    ),
    (
        "watermark above one",
        "[workspace]\nhigh_watermark = 1.5\n",
        "workspace.high_watermark: must be a number <= 1, got float 1.5",
    ),
    (
        "bad capacity",
        '[workspace]\ncapacity = "lots"\n',
        "workspace.capacity: must be a positive byte count or a size like '10GiB' or '500MB', "
        "got 'lots'",
    ),
    (
        "bad listen",
        '[http]\nlisten = "127.0.0.1:99999"\n',
        "http.listen: must be host:port with a port 0-65535, got '127.0.0.1:99999'",
    ),
    (
        "undefined tracker",
        '[repos.web]\ntracker = "gh"\nslug = "o/w"\n',
        "repos.web.tracker: names no defined tracker 'gh'; defined: local",
    ),
    (
        "undefined agent",
        REPO + 'agent = "gpt"\n',
        "repos.web.agent: names no defined agent preset 'gpt'; defined: claude, codex",
    ),
    (
        "inline token",
        '[trackers.t]\nkind = "github"\ntoken = "ghp_x"\n',
        "trackers.t.token: " + SECRET_HINT.format("token"),
    ),
    (
        "inline webhook secret",
        '[trackers.t]\nkind = "github"\nwebhook_secret = "s"\n',
        "trackers.t.webhook_secret: " + SECRET_HINT.format("webhook_secret"),
    ),
    (
        "inline api key",
        '[agents.claude]\napi_key = "sk"\n',
        "agents.claude.api_key: " + SECRET_HINT.format("api_key"),
    ),
    (
        "inline password",
        REPO + '[repos.web.ci]\npassword = "pw"\n',
        "repos.web.ci.password: " + SECRET_HINT.format("password"),
    ),
    (
        "inline urls",
        '[notify]\nurls = "tgram://t/c"\n',
        "notify.urls: " + SECRET_HINT.format("urls"),
    ),
    (
        "bad regex",
        REPO + '[[repos.web.deploy.probes]]\nkind = "http"\n'
        'url = "https://w.example.com/"\nbody_regex = "("\n',
        "repos.web.deploy.probes[0].body_regex: is not a valid regular expression: "
        "missing ), unterminated subpattern at position 0",
    ),
    (
        "workdir escapes",
        REPO + 'workdir = "../other"\n',
        "repos.web.workdir: must be a relative path without '..', got '../other'",
    ),
    (
        "copy target escapes",
        REPO + 'copy_files = [{ from = "a", to = "../b" }]\n',
        "repos.web.copy_files[0].to: must be a relative path without '..', got '../b'",
    ),
    (
        "git-crypt needs clone",
        REPO + 'git_crypt_key_env = "KEY"\n',
        'repos.web.git_crypt_key_env: needs workspace = "clone" (worktrees share the key)',
    ),
    (
        "command placeholder",
        '[agents.x]\nkind = "command"\ncommand = ["run", "{prompt}"]\n',
        "agents.x.command: unknown placeholder {prompt}; allowed: {prompt_file}, {workdir}",
    ),
    (
        "command preset needs command",
        '[agents.x]\nkind = "command"\n',
        "agents.x.command: missing required value",
    ),
    (
        "price for a claude agent",
        "[agents.claude]\nprice_input_usd_per_mtok = 3\n",
        'agents.claude.price_input_usd_per_mtok: only for kind = "codex" (a claude agent\'s '
        "cost is not computed from token prices)",
    ),
    (
        "negative price",
        "[agents.codex]\nprice_output_usd_per_mtok = -1\n",
        "agents.codex.price_output_usd_per_mtok: must be a number >= 0, got integer -1",
    ),
    (
        "secret in agent env",
        '[agents.claude.env]\nMY_TOKEN = "t"\n',
        "agents.claude.env.MY_TOKEN: looks like a secret; an agent gets only its own key "
        "(api_key_env/api_key_file), got 'MY_TOKEN'",
    ),
    (
        "bad env name",
        '[trackers.t]\nkind = "github"\ntoken_env = "my token"\n',
        "trackers.t.token_env: must be an environment variable name, got 'my token'",
    ),
    (
        "heartbeat vs lease",
        "[scheduler]\nlease_s = 5\nheartbeat_s = 10\n",
        "scheduler.heartbeat_s: must be less than lease_s (5)",
    ),
    (
        "woodpecker needs repo id",
        REPO + '[repos.web.ci]\nkind = "woodpecker"\nbase_url = "https://ci.example.com"\n',
        "repos.web.ci.repo_id: missing required value",
    ),
    (
        "bad repository name",
        '[repos."my repo"]\ntracker = "local"\nslug = "o/w"\nremote_url = "w.git"\n',
        "repos.my repo: a repository name may hold only letters, digits, '.', '_' and '-', "
        "starting with a letter or digit, got 'my repo'",
    ),
    ("section not a table", "scheduler = 3\n", "scheduler: must be a table, got integer 3"),
    # Longer than the store's columns: PostgreSQL refused them when the daemon started.
    (
        "repo name too long",
        REPO.replace("web", "w" * 201, 1),
        f"repos.{'w' * 201}: must be at most 200 characters, got 201",
    ),
    (
        "slug too long",
        REPO.replace("o/web", "o/" + "s" * 299),
        "repos.web.slug: must be at most 300 characters, got 301",
    ),
    (
        "default branch too long",
        REPO + f'default_branch = "{"b" * 201}"\n',
        "repos.web.default_branch: must be at most 200 characters, got 201",
    ),
    (
        "tracker name too long",
        f'[trackers.{"t" * 101}]\nkind = "local"\n',
        f"trackers.{'t' * 101}: must be at most 100 characters, got 101",
    ),
]


@pytest.mark.parametrize(("text", "line"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_problem_is_one_exact_line(tmp_path: Path, text: str, line: str) -> None:
    """Each kind of mistake gives exit 2 and exactly its `file:key: problem` line."""
    path = tmp_path / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert check_command(path, out, err) == 2
    assert err.getvalue() == f"{path}:{line}\n" and out.getvalue() == ""


def test_all_problems_are_collected(tmp_path: Path) -> None:
    """Several mistakes are all reported, not just the first."""
    path = tmp_path / "p.toml"
    path.write_text(
        'log_level = "loud"\nmax_concurrency = -1\n' + REPO + "test_command = []\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    assert [p.split(": ")[0] for p in caught.value.problems] == [
        f"{path}:log_level",
        f"{path}:max_concurrency",
        f"{path}:repos.web.test_command",
    ]


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    """A TOML syntax error is reported with its line and column."""
    path = tmp_path / "p.toml"
    path.write_text('log_level = "info"\nmax_concurrency = \n', encoding="utf-8")
    err = io.StringIO()
    assert check_command(path, io.StringIO(), err) == 2
    assert err.getvalue() == f"{path}:2:19: invalid TOML: Invalid value\n"


def test_missing_file_is_a_problem(tmp_path: Path) -> None:
    """A config file that does not exist is a one-line problem, not a traceback."""
    path = tmp_path / "absent.toml"
    err = io.StringIO()
    assert check_command(path, io.StringIO(), err) == 2
    assert err.getvalue() == f"{path}: cannot read the file: No such file or directory\n"


def _toml(value: object) -> str:
    """A TOML value; tables become inline tables, so a whole document is one line per key."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _write_document(path: Path, document: dict[str, Any]) -> None:
    path.write_text(
        "".join(f"{json.dumps(k)} = {_toml(v)}\n" for k, v in document.items()), encoding="utf-8"
    )


def _leaves(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for key, value in table.items():
        if isinstance(value, dict):
            found += _leaves(value, (*prefix, key))
        else:
            found.append((*prefix, key))
    return found


def _replaced(data: dict[str, Any], where: tuple[str, ...], value: object) -> dict[str, Any]:
    copy: dict[str, Any] = {**data}
    if len(where) == 1:
        copy[where[0]] = value
    else:
        copy[where[0]] = _replaced(data[where[0]], where[1:], value)
    return copy


@pytest.mark.parametrize("odd", [{"a": 1}, [1, "x"], True, -7, ""], ids=repr)
def test_odd_values_anywhere_never_crash(tmp_path: Path, odd: object) -> None:
    """Any example key set to an odd value is a ConfigError naming that key, never a crash."""
    data = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for where in _leaves(data):
        path = tmp_path / "p.toml"
        _write_document(path, _replaced(data, where, odd))
        try:
            load_settings(path, environ={})
        except ConfigError as exc:
            assert all(p.startswith(f"{path}:") for p in exc.problems)


def test_table_where_a_value_belongs_names_that_key(tmp_path: Path) -> None:
    """A table given for any example value is reported at exactly that key."""
    data = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    unreported = []
    for where in _leaves(data):
        path = tmp_path / "p.toml"
        _write_document(path, _replaced(data, where, {"a": 1}))
        try:
            load_settings(path, environ={})
            unreported.append(where)
        except ConfigError as exc:
            if not any(p.startswith(f"{path}:{'.'.join(where)}: ") for p in exc.problems):
                unreported.append(where)
    assert len(_leaves(data)) > 100 and unreported == []


def test_cli_config_check_prints_problems_without_traceback(tmp_path: Path) -> None:
    """`python -m pipeline config check FILE` exits 2 with the problem lines only."""
    path = tmp_path / "pipeline.toml"
    path.write_text(
        REPO + 'test_command = 3\n[trackers.t]\nkind = "github"\ntoken = "x"\n', encoding="utf-8"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "config", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"{path}:trackers.t.token: " + SECRET_HINT.format("token"),
        f"{path}:repos.web.test_command: must be a string, got integer 3",
    ]
