"""A private HTTPS-style remote that demands a token: clone, fetch and push through the daemon."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import PushSettings, RepoSettings, SecretRef, WorkspaceSettings
from pipeline.core.errors import FatalError
from pipeline.git.cred import credential_env
from pipeline.run.publish import PublishHooks, publish
from pipeline.testing.git_http import GitHttpServer
from pipeline.testing.gitrepos import commit_to_remote
from pipeline.testing.scopes import scope_for
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

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


@pytest.fixture
def workspaces(tmp_path: Path) -> Workspaces:
    """Workspaces on a fresh volume that fetch on every prepare."""
    volume = tmp_path / "volume"
    volume.mkdir()
    return Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0.0))


def demo_repo(server: GitHttpServer, token_env: str | None) -> RepoSettings:
    token = SecretRef(env=token_env) if token_env else SecretRef()
    return RepoSettings(
        name="demo",
        tracker="local",
        slug="o/demo",
        remote_url=server.url("demo.git"),
        push=PushSettings(token=token),
    )


def prepare(spaces: Workspaces, repo: RepoSettings, run_id: int) -> PreparedWorkspace:
    return spaces.prepare(
        repo, run_id=run_id, issue_ref=f"run{run_id}", base_env={}, events=RecordingSink()
    )


def run_publish(
    repo: RepoSettings, ws: PreparedWorkspace, run_id: int, sink: RecordingSink, recorded: list[str]
) -> str:
    (ws.path / f"f{run_id}.txt").write_text("f\n", encoding="utf-8")
    git(ws.path, "add", "-A")
    git(ws.path, "commit", "-q", "-m", f"Add f{run_id}\n\nAfk-Run: {run_id}")
    result = publish(
        scope_for(run_id, repo, ws, sink),
        PublishHooks(retest=lambda: True, record_pushed=recorded.append),
    )
    return result.pushed_sha


def files_holding(root: Path, needle: str) -> list[Path]:
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and needle.encode() in path.read_bytes()
    ]


def test_token_serves_clone_fetch_and_push_and_is_never_stored(
    server: GitHttpServer, tmp_path: Path, workspaces: Workspaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror clones, fetches and pushes with the token via askpass; no file holds it."""
    monkeypatch.setenv("AFK_TEST_TOKEN", TOKEN)
    repo = demo_repo(server, "AFK_TEST_TOKEN")
    sink, recorded = RecordingSink(), list[str]()
    first = prepare(workspaces, repo, 1)
    assert server.refused >= 1 and set(server.users) == {"x-access-token"}
    sha = run_publish(repo, first, 1, sink, recorded)
    assert recorded == [sha] and git(tmp_path / "srv" / "demo.git", "rev-parse", "main") == sha
    workspaces.release(first, succeeded=True)
    newer = commit_to_remote(str(tmp_path / "srv" / "demo.git"), {"n.txt": "n\n"}, "newer")
    second = prepare(workspaces, repo, 2)
    assert second.base_sha == newer
    assert run_publish(repo, second, 2, sink, recorded) == recorded[-1]
    assert files_holding(tmp_path / "volume", TOKEN) == []
    assert TOKEN not in repr(sink.events)


def test_missing_token_is_a_credentials_error(
    server: GitHttpServer, workspaces: Workspaces
) -> None:
    """Without a token the remote refuses the clone and the error names the setting."""
    with pytest.raises(FatalError) as caught:
        prepare(workspaces, demo_repo(server, None), 1)
    assert caught.value.kind == "push_auth" and "push.token" in str(caught.value)
    assert server.url("demo.git") in str(caught.value)


def test_wrong_token_is_a_credentials_error(
    server: GitHttpServer, workspaces: Workspaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong token fails as push_auth and its value appears in no message."""
    monkeypatch.setenv("AFK_TEST_TOKEN", "wrong-token-77")
    with pytest.raises(FatalError) as caught:
        prepare(workspaces, demo_repo(server, "AFK_TEST_TOKEN"), 1)
    assert caught.value.kind == "push_auth" and "wrong-token-77" not in str(caught.value)


def test_a_token_revoked_before_publish_fails_the_push_as_credentials(
    server: GitHttpServer, workspaces: Workspaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publish's fetch with a token the server no longer takes fails push_auth, not a retry."""
    monkeypatch.setenv("AFK_TEST_TOKEN", TOKEN)
    repo = demo_repo(server, "AFK_TEST_TOKEN")
    ws = prepare(workspaces, repo, 1)
    monkeypatch.setenv("AFK_TEST_TOKEN", "revoked-token-5")
    with pytest.raises(FatalError) as caught:
        run_publish(repo, ws, 1, RecordingSink(), [])
    assert caught.value.kind == "push_auth" and "revoked-token-5" not in str(caught.value)


def test_credential_env_is_private_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The askpass script lives in a 0700 directory that is gone after the command."""
    monkeypatch.setenv("AFK_TEST_TOKEN", TOKEN)
    push = PushSettings(token=SecretRef(env="AFK_TEST_TOKEN"))
    with credential_env(push, {}) as env:
        script = Path(env["GIT_ASKPASS"])
        assert oct(script.parent.stat().st_mode & 0o777) == "0o700"
        assert TOKEN not in script.read_text(encoding="utf-8")
        config = {
            env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
            for i in range(int(env["GIT_CONFIG_COUNT"]))
        }
        assert config == {"credential.helper": ""}
        assert "ServerAliveInterval" in env["GIT_SSH_COMMAND"]
    assert not script.parent.exists()
