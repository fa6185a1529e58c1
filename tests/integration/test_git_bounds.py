"""Every git operation is bounded: a remote that hangs fails within its limit, leaving no git."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import PushSettings, RepoSettings, SecretRef, WorkspaceSettings
from pipeline.core.errors import CancelRequested, LeaseLost, RetryableError
from pipeline.core.proc import StopToken
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitLimits, GitRunner
from pipeline.run.publish import PublishHooks, PublishOptions, publish
from pipeline.testing.git_http import GitHttpServer, SilentServer
from pipeline.testing.scopes import scope_for
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

TOKEN = "sentinel-bounds-token"
# Short bounds so a hang shows in seconds; generous against a loaded machine otherwise.
LIMITS = GitLimits(local_s=120.0, network_s=120.0, stall_s=2, kill_grace_s=2.0)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def git_processes(marker: str) -> list[str]:
    """Live processes (children of this test, or naming ``marker``) that are git."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        child = ppid == os.getpid() and "git" in argv
        if argv and (child or (marker in argv and "git" in argv)):
            found.append(f"{entry.name}: {argv}")
    return found


def wait_for(condition: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHttpServer]:
    """A token-protected HTTP remote holding demo.git with one commit on main."""
    monkeypatch.setenv("AFK_TEST_TOKEN", TOKEN)
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


def spaces(tmp_path: Path) -> Workspaces:
    """Workspaces on the test volume (a new one behaves as another daemon would)."""
    volume = tmp_path / "volume"
    volume.mkdir(exist_ok=True)
    return Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0.0), git_limits=LIMITS)


def demo_repo(url: str, *, token: bool = True) -> RepoSettings:
    secret = SecretRef(env="AFK_TEST_TOKEN") if token else SecretRef()
    return RepoSettings(
        name="demo", tracker="local", slug="o/demo", remote_url=url, push=PushSettings(token=secret)
    )


def prepare(
    workspaces: Workspaces, repo: RepoSettings, run_id: int, stop: StopToken | None = None
) -> PreparedWorkspace:
    return workspaces.prepare(
        repo,
        run_id=run_id,
        issue_ref=f"run{run_id}",
        base_env={},
        events=RecordingSink(),
        stop=stop,
    )


def test_a_stalled_http_clone_fails_within_its_bound_and_the_next_prepare_works(
    server: GitHttpServer, tmp_path: Path
) -> None:
    """A remote that never answers: the clone gives up naming git and the remote, no git lives."""
    repo = demo_repo(server.url("demo.git"))
    server.stall("")
    with pytest.raises(RetryableError) as caught:
        prepare(spaces(tmp_path), repo, 1)
    assert caught.value.kind == "git_fetch"
    assert f"git clone from {server.url('demo.git')} gave no data for 2s" in str(caught.value)
    assert git_processes(server.url("")) == []
    server.stall(None)
    ws = prepare(spaces(tmp_path), repo, 2)  # another daemon: the repo lock is free too
    assert ws.base_sha == git(tmp_path / "srv" / "demo.git", "rev-parse", "main")


def test_a_silent_git_daemon_is_killed_at_the_wall_clock(tmp_path: Path) -> None:
    """A git:// remote that accepts and says nothing is killed at network_s, group and all."""
    limits = GitLimits(network_s=2.0, stall_s=60, kill_grace_s=1.0)
    volume = tmp_path / "volume"
    volume.mkdir()
    workspaces = Workspaces(volume, WorkspaceSettings(), git_limits=limits)
    with SilentServer() as silent:
        url = f"git://127.0.0.1:{silent.port}/demo.git"
        with pytest.raises(RetryableError) as caught:
            prepare(workspaces, demo_repo(url, token=False), 1)
        assert silent.connections >= 1
        assert str(caught.value) == f"git clone from {url} did not finish within 2s; killed"
        assert git_processes(f"127.0.0.1:{silent.port}") == []


@pytest.mark.parametrize(
    ("reason", "raised"),
    [("cancelled", CancelRequested), ("shutdown", CancelRequested), ("lease_lost", LeaseLost)],
)
def test_a_stop_kills_a_hanging_fetch_and_its_helpers(
    server: GitHttpServer, tmp_path: Path, reason: str, raised: type[Exception]
) -> None:
    """A cancel, SIGTERM's shutdown or a lost lease kills a hung fetch with git-remote-http."""
    repo = demo_repo(server.url("demo.git"))
    volume = tmp_path / "volume"
    volume.mkdir()
    workspaces = Workspaces(
        volume, WorkspaceSettings(fetch_debounce_s=0.0), git_limits=GitLimits(stall_s=600)
    )
    prepare(workspaces, repo, 1)
    server.stall("")
    stop = StopToken()
    stalled_before = server.stalled
    hanging: list[str] = []

    def cancel_once_git_hangs() -> None:
        wait_for(lambda: server.stalled > stalled_before, "the fetch to reach the server")
        hanging.extend(git_processes(server.url("")))
        stop.stop(reason)

    helper = threading.Thread(target=cancel_once_git_hangs)
    helper.start()
    with pytest.raises(raised) as caught:
        prepare(workspaces, repo, 2, stop=stop)
    helper.join(timeout=30)
    assert f"stopped: {reason}" in str(caught.value)
    assert any("remote-http" in line for line in hanging)  # seen alive, so the scan works
    assert git_processes(server.url("")) == []
    server.stall(None)
    assert prepare(workspaces, repo, 3).path.is_dir()


def test_a_push_that_hangs_fails_as_git_push_naming_the_remote(
    server: GitHttpServer, tmp_path: Path
) -> None:
    """Publish's push to a remote that stalls on receive-pack fails within the stall bound."""
    repo = demo_repo(server.url("demo.git"))
    ws = prepare(spaces(tmp_path), repo, 1)
    (ws.path / "f.txt").write_text("f\n", encoding="utf-8")
    git(ws.path, "add", "f.txt")
    git(ws.path, "commit", "-q", "-m", "Add f\n\nAfk-Run: 1")
    server.stall("git-receive-pack")
    recorded: list[str] = []
    with pytest.raises(RetryableError) as caught:
        publish(
            scope_for(1, repo, ws, RecordingSink()),
            PublishHooks(retest=lambda: True, record_pushed=recorded.append),
            PublishOptions(limits=LIMITS),
        )
    assert caught.value.kind == "git_push" and recorded == []
    assert f"git push to {server.url('demo.git')} gave no data for 2s" in str(caught.value)
    assert TOKEN not in str(caught.value)
    assert git_processes(server.url("")) == []


def test_a_local_command_over_its_wall_clock_is_killed_with_its_children(tmp_path: Path) -> None:
    """A local git command that never ends (its upload-pack sleeps) is killed at local_s."""
    git(tmp_path, "init", "-q", "repo")
    git(tmp_path, "init", "-q", "--bare", "other.git")
    runner = GitRunner(
        GitRepo.plain(tmp_path / "repo"), limits=GitLimits(local_s=1.0, kill_grace_s=1.0)
    )
    with pytest.raises(RetryableError) as caught:
        runner.run("fetch", "--upload-pack=sleep 3600 #", str(tmp_path / "other.git"))
    assert caught.value.kind == "git_timeout"
    assert "did not finish within 1s; killed" in str(caught.value)
    assert git_processes("sleep 3600") == []


def test_input_that_takes_many_polls_to_write_is_written_whole(tmp_path: Path) -> None:
    """A command fed 64 MiB on stdin (publish's size check feeds one line per object a
    run adds) gets all of it and answers. The runner's retry after its first poll passed
    no input, so the rest was never written: git waited until its time limit, killed."""
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    data = os.urandom(1 << 20) * 64
    runner = GitRunner(GitRepo.plain(repo), None, GitLimits(local_s=60.0, kill_grace_s=2.0))
    answer = runner.ok("hash-object", "--stdin", input_data=data).strip()
    blob = subprocess.run(
        ["git", "hash-object", "--stdin"], cwd=repo, input=data, capture_output=True, check=True
    )
    assert answer == blob.stdout.decode().strip()
