"""Private remotes under ``pipeline run``: clone, fetch and push; the agent sees no credential.

Two remotes that refuse anyone without the credential: a loopback smart-HTTP
server (``git http-backend`` behind HTTP Basic auth) demanding a token, and an
``ssh`` that demands one key file (``fake_ssh.py``, first on the daemon's PATH).
Two issues run one after the other; a commit lands on the remote between them,
so the second run must fetch. The agent (``cred_agent.py``) reads everything it
can reach and pushes what it read; the credentials must be in none of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.configs import merged, write_config
from pipeline.testing.git_http import GitHttpServer
from pipeline.testing.gitrepos import commit_to_remote, git, make_remote

from .conftest import CALC_PROJECT, Cli, local_config, stop_daemon

pytestmark = pytest.mark.slow

TOKEN = "sntl-git-token-Rk52wq"
KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nsntl-ssh-key-Jv83tm\n-----END OPENSSH PRIVATE KEY-----\n"
)
AGENT = Path(__file__).with_name("cred_agent.py")
FAKE_SSH = Path(__file__).with_name("fake_ssh.py")


@dataclass
class Remote:
    """A private remote: its URL, its bare repository, and what it saw."""

    url: str
    bare: Path
    push_table: str  # the ``[repos.calc.push]`` lines
    key_dir: Path | None = None
    http: GitHttpServer | None = None
    ssh_log: Path | None = None

    def requests(self) -> list[str]:
        """The git services the remote served to an authenticated client."""
        if self.http is not None:
            return self.http.served
        assert self.ssh_log is not None
        lines = self.ssh_log.read_text().splitlines() if self.ssh_log.exists() else []
        return [line.split()[1] for line in lines if line.startswith("ok ")]


@pytest.fixture(params=["https", "ssh"])
def remote(
    request: pytest.FixtureRequest, tmp_path: Path, host_dir: Path, cli_env: dict[str, str]
) -> Iterator[Remote]:
    """The private remote over each transport, holding the project on main."""
    srv = tmp_path / "srv"
    srv.mkdir()
    bare = Path(make_remote(srv, CALC_PROJECT, name="calc"))
    if request.param == "https":
        cli_env["AFK_E2E_GIT_TOKEN"] = TOKEN
        with GitHttpServer(srv, TOKEN) as server:
            yield Remote(
                server.url("calc.git"), bare, 'token_env = "AFK_E2E_GIT_TOKEN"\n', http=server
            )
        return
    key_dir = host_dir / "keys"  # the host's disk, not /tmp: only the daemon's hiding hides it
    key_dir.mkdir()
    key = key_dir / "deploy_key"
    key.write_text(KEY)
    key.chmod(0o600)
    sshd = tmp_path / "sshd"
    sshd.mkdir()
    (sshd / "expected").write_text(KEY)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    wrapper.write_text(
        f"#!/bin/sh\nFAKE_SSH_EXPECTED={sshd / 'expected'} FAKE_SSH_LOG={sshd / 'log'} "
        f'exec {sys.executable} {FAKE_SSH} "$@"\n'
    )
    wrapper.chmod(0o755)
    cli_env["PATH"] = f"{bin_dir}:{cli_env['PATH']}"
    url = f"ssh://git@afk-test.invalid{bare}"
    yield Remote(url, bare, f'ssh_key_file = "{key}"\n', key_dir=key_dir, ssh_log=sshd / "log")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest) -> str | None:
    """The database the daemon keeps its history in: None for the default SQLite file."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


def _refused_without_credentials(remote: Remote, env: dict[str, str]) -> str:
    """What a client without the credential gets from the remote (it must be refused)."""
    done = subprocess.run(
        ["git", "ls-remote", remote.url],
        env={**env, "GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": "ssh"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


def test_private_remote_clone_fetch_and_push_keep_credentials_from_the_agent(
    tmp_path: Path, remote: Remote, cli_env: dict[str, str], engine: str | None
) -> None:
    """Clone, fetch and push to a remote demanding a credential work; the agent finds none of it."""
    refusal = _refused_without_credentials(remote, cli_env)
    assert "could not read Username" in refusal or "Permission denied" in refusal, refusal
    look = [str(tmp_path), str(Path(cli_env["HOME"]))]
    if remote.key_dir is not None:
        look.append(str(remote.key_dir))
    argv = [sys.executable, str(AGENT), "{workdir}"]
    config = local_config(tmp_path, remote.url, argv, {"CRED_LOOK": ":".join(look)})
    changes: dict[str, Any] = {
        # The loot file holds all the agent read (tens of MiB on some machines): it must
        # be pushed for the test to search it, whatever the size limit's default.
        "repos": {"calc": {"push": tomllib.loads(remote.push_table), "max_file_bytes": "1GiB"}},
        "workspace": {"fetch_debounce_s": 0},
    }
    if engine is not None:
        changes["database_url"] = engine
    write_config(config, merged(tomllib.loads(config.read_text()), changes))
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "First note", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "succeeded", 120, daemon, log)
        upstream = commit_to_remote(str(remote.bare), {"upstream.txt": "x\n"}, "upstream change")
        cli("issue", "add", "--repo", "calc", "--title", "Second", "--label", "ready-for-agent")
        runs = cli.wait_for(
            lambda rs: len(rs) == 2 and all(r["state"] == "succeeded" for r in rs),
            120,
            daemon,
            log,
        )
    finally:
        stop_daemon(daemon)
    second = max(runs, key=lambda r: r["id"])
    assert git(remote.bare, "rev-parse", "main").strip() == second["pushed_sha"]
    assert git(remote.bare, "merge-base", "--is-ancestor", upstream, "main").strip() == ""
    assert git(remote.bare, "show", "main:notes-2.txt").strip() == "note 2"
    served = remote.requests()
    assert served.count("git-receive-pack") >= 2, served
    assert served.count("git-upload-pack") >= 2, served  # the clone, a fetch
    loot = "\n".join(
        git(remote.bare, "show", f"main:loot-{n}.txt") for n in (1, 2)
    ) + log.read_text(errors="replace")
    assert "CRED_LOOK" in loot and "note 1" in loot  # the agent did read its places
    assert TOKEN not in loot and "sntl-ssh-key" not in loot
    stored = list((tmp_path / "volume").rglob("*config*"))
    assert all(TOKEN not in p.read_text(errors="replace") for p in stored if p.is_file())
    assert os.environ.get("AFK_E2E_GIT_TOKEN") is None  # the token lived only in cli_env
