"""Publishing over HTTPS-style token auth to a loopback smart-HTTP git server."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.errors import FatalError
from pipeline.gitcred import credential_env
from pipeline.publish import publish
from pipeline.settings import PushSettings, RepoSettings, SecretRef
from pipeline.testing.git_http import GitHttpServer
from pipeline.testing.sinks import RecordingSink

TOKEN = "sentinel-9b1e4f-token"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A token-protected git server holding demo.git with one commit on main."""
    root = tmp_path / "srv"
    root.mkdir()
    git(root, "init", "-q", "--bare", "--initial-branch=main", "demo.git")
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(root / "demo.git"), str(seed))
    (seed / "README.md").write_text("hello\n", encoding="utf-8")
    git(seed, "add", "README.md")
    git(seed, "commit", "-q", "-m", "seed")
    git(seed, "push", "-q", "origin", "HEAD:main")
    with GitHttpServer(root, TOKEN) as running:
        yield running


def worktree_with_run_commit(tmp_path: Path) -> tuple[Path, Path, str]:
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(tmp_path / "srv" / "demo.git"), str(checkout))
    base = git(checkout, "rev-parse", "HEAD")
    worktree = tmp_path / "wt"
    git(checkout, "worktree", "add", "-q", "-b", "afk/run-5", str(worktree), base)
    (worktree / "f.txt").write_text("f\n", encoding="utf-8")
    git(worktree, "add", "f.txt")
    git(worktree, "commit", "-q", "-m", "Add f\n\nAfk-Run: 5")
    return checkout, worktree, base


def run_publish(server: GitHttpServer, worktree: Path, base: str, token_env: str | None,
                sink: RecordingSink, recorded: list[str]) -> str:
    token = SecretRef(env=token_env) if token_env else SecretRef()
    repo = RepoSettings(name="demo", tracker="local", slug="o/demo",
                        remote_url=server.url("demo.git"), push=PushSettings(token=token))
    result = publish(run_id=5, repo=repo, repo_root=worktree, branch="afk/run-5", base_sha=base,
                     events=sink, stop=None, retest=lambda: True, resolve_conflict=None,
                     record_pushed=recorded.append)
    return result.pushed_sha


def test_token_authenticates_fetch_and_push_and_is_never_stored(
        server: GitHttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The token reaches the server through askpass only; no config or event holds it."""
    monkeypatch.setenv("AFK_TEST_TOKEN", TOKEN)
    checkout, worktree, base = worktree_with_run_commit(tmp_path)
    sink, recorded = RecordingSink(), list[str]()
    sha = run_publish(server, worktree, base, "AFK_TEST_TOKEN", sink, recorded)
    assert recorded == [sha]
    assert git(tmp_path / "srv" / "demo.git", "rev-parse", "main") == sha
    assert server.refused >= 1 and set(server.users) == {"x-access-token"}
    for path in [*(checkout / ".git").rglob("config*"), worktree / ".git"]:
        assert TOKEN not in path.read_text(encoding="utf-8", errors="replace")
    assert TOKEN not in repr(sink.events)


def test_missing_token_is_a_credentials_error(server: GitHttpServer, tmp_path: Path) -> None:
    """Without a token the remote refuses and the error names the setting to fix."""
    _, worktree, base = worktree_with_run_commit(tmp_path)
    with pytest.raises(FatalError) as caught:
        run_publish(server, worktree, base, None, RecordingSink(), [])
    assert caught.value.kind == "push_auth" and "push.token" in str(caught.value)


def test_wrong_token_is_a_credentials_error(server: GitHttpServer, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong token fails as push_auth and its value appears in no message."""
    monkeypatch.setenv("AFK_TEST_TOKEN", "wrong-token-77")
    _, worktree, base = worktree_with_run_commit(tmp_path)
    with pytest.raises(FatalError) as caught:
        run_publish(server, worktree, base, "AFK_TEST_TOKEN", RecordingSink(), [])
    assert caught.value.kind == "push_auth" and "wrong-token-77" not in str(caught.value)


def test_credential_env_is_private_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The askpass script lives in a 0700 directory that is gone after the command."""
    monkeypatch.setenv("AFK_TEST_TOKEN", TOKEN)
    push = PushSettings(token=SecretRef(env="AFK_TEST_TOKEN"))
    with credential_env(push, {}) as env:
        script = Path(env["GIT_ASKPASS"])
        assert oct(script.parent.stat().st_mode & 0o777) == "0o700"
        assert TOKEN not in script.read_text(encoding="utf-8")
        config = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
                  for i in range(int(env["GIT_CONFIG_COUNT"]))}
        assert config == {"core.hooksPath": os.devnull, "credential.helper": ""}
    assert not script.parent.exists()
