"""Publishing with real git: a bare remote in tmp_path, the daemon's mirror, checkout and slot."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.settings import CopyFile, PushSettings, RepoSettings, WorkspaceSettings
from pipeline.core.errors import EscalationError, RetryableError
from pipeline.git.repo import GitRepo
from pipeline.run.publish import (
    PublishHooks,
    PublishOptions,
    PublishResult,
    find_pushed,
    publish,
)
from pipeline.testing.scopes import scope_for
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit_file(cwd: Path, name: str, text: str, message: str) -> str:
    (cwd / name).write_text(text, encoding="utf-8")
    git(cwd, "add", name)
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


@dataclass
class World:
    """A bare remote, the daemon's mirror and checkout, run 1's slot and a colleague's clone."""

    tmp: Path
    remote: Path
    ws: PreparedWorkspace
    other: Path
    base_sha: str
    run_id: int = 1
    recorded: list[str] = field(default_factory=list)
    retests: list[str] = field(default_factory=list)
    events: RecordingSink = field(default_factory=RecordingSink)

    @property
    def branch(self) -> str:
        return self.ws.branch

    @property
    def worktree(self) -> Path:
        return self.ws.path

    @property
    def tree(self) -> GitRepo:
        return self.ws.git

    @property
    def checkout(self) -> Path:
        return self.ws.git.common_dir.parent

    def repo(self, **push: object) -> RepoSettings:
        return RepoSettings(
            name="demo",
            tracker="local",
            slug="o/demo",
            remote_url=str(self.remote),
            push=PushSettings(**push),
        )  # type: ignore[arg-type]

    def run_commit(self, name: str = "feature.txt", text: str = "feature\n") -> str:
        message = f"Add {name}\n\nAfk-Run: {self.run_id}"
        return commit_file(self.worktree, name, text, message)

    def remote_commit(self, name: str, text: str) -> str:
        git(self.other, "pull", "-q", "--rebase", "origin", "main")
        sha = commit_file(self.other, name, text, f"colleague edits {name}")
        git(self.other, "push", "-q", "origin", "HEAD:main")
        return sha

    def remote_main(self) -> str:
        return git(self.remote, "rev-parse", "refs/heads/main")

    def publish_as(
        self, repo: RepoSettings, remote_branch: str | None = None, **hooks: Any
    ) -> PublishResult:
        """Publish run ``run_id`` from the slot through the mirror, as the flow does."""
        fields: dict[str, Any] = {
            "retest": lambda: True,
            "record_pushed": self.recorded.append,
            **hooks,
        }
        ws = replace(self.ws, base_sha=self.base_sha)
        scope = scope_for(self.run_id, repo, ws, self.events)
        return publish(scope, PublishHooks(**fields), PublishOptions(remote_branch=remote_branch))

    def publish(
        self,
        *,
        retest: Callable[[], bool] | None = None,
        resolve: Callable[[str], bool] | None = None,
        record: Callable[[str], None] | None = None,
        **push: object,
    ) -> PublishResult:
        def default_retest() -> bool:
            self.retests.append(git(self.worktree, "rev-parse", "HEAD"))
            return True

        return self.publish_as(
            self.repo(**push),
            retest=retest or default_retest,
            resolve_conflict=resolve,
            record_pushed=record or self.recorded.append,
        )


@pytest.fixture
def world(tmp_path: Path) -> World:
    """A remote with one commit on main, the daemon's workspace prepared for run 1."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", str(remote))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(remote), str(seed))
    base = commit_file(seed, "README.md", "hello\nworld\n", "seed")
    git(seed, "push", "-q", "origin", "HEAD:main")
    volume = tmp_path / "volume"
    volume.mkdir()
    repo = RepoSettings(name="demo", tracker="local", slug="o/demo", remote_url=str(remote))
    ws = Workspaces(volume, WorkspaceSettings()).prepare(
        repo, run_id=1, issue_ref="run", base_env={}, events=RecordingSink()
    )
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(remote), str(other))
    return World(tmp_path, remote, ws, other, base)


def test_plain_publish_pushes_head_and_records_it(world: World) -> None:
    """With an unmoved base the run's commit is pushed as is, recorded once, no re-test."""
    sha = world.run_commit()
    result = world.publish()
    assert result == PublishResult(sha, "main", False, False, False, 0)
    assert world.remote_main() == sha
    assert world.recorded == [sha]
    assert world.retests == []


def test_moved_base_is_rebased_retested_and_pushed(world: World) -> None:
    """A non-conflicting remote commit during the run: rebase, re-test on the result, push."""
    original = world.run_commit()
    theirs = world.remote_commit("other.txt", "theirs\n")
    result = world.publish()
    assert result.rebased and result.retested and not result.already_on_remote
    assert result.pushed_sha != original
    assert world.remote_main() == result.pushed_sha
    assert git(world.remote, "rev-parse", f"{result.pushed_sha}~1") == theirs
    assert world.retests == [result.pushed_sha]
    assert find_pushed(world.ws.mirror, "refs/heads/main", 1) == result.pushed_sha


def test_conflict_escalates_and_keeps_the_run_commits(world: World) -> None:
    """A conflicting remote commit with no agent to resolve it escalates; nothing is lost."""
    mine = world.run_commit("README.md", "mine\n")
    before = world.remote_commit("README.md", "theirs\n")
    with pytest.raises(EscalationError) as caught:
        world.publish()
    assert caught.value.reason == "conflict"
    assert "README.md" in str(caught.value) and "afk/run-1" in str(caught.value)
    assert git(world.worktree, "rev-parse", "afk/run-1") == mine
    assert git(world.worktree, "status", "--porcelain") == ""
    assert not (world.tree.git_dir / "rebase-merge").exists()
    assert world.remote_main() == before
    assert world.recorded == []


def test_conflict_resolved_by_the_agent_is_pushed(world: World) -> None:
    """The conflict is handed to the resolver once; once it resolves, the result is pushed."""
    world.run_commit("README.md", "mine\n")
    world.remote_commit("README.md", "theirs\n")
    descriptions: list[str] = []

    def resolve(description: str) -> bool:
        descriptions.append(description)
        git(world.worktree, "rebase", "-q", "-X", "theirs", "origin/main")
        return True

    result = world.publish(resolve=resolve)
    assert len(descriptions) == 1 and "README.md" in descriptions[0]
    assert world.remote_main() == result.pushed_sha
    assert git(world.remote, "show", "main:README.md") == "mine"
    assert result.retested


def test_red_tests_after_rebase_escalate_without_pushing(world: World) -> None:
    """A re-test that fails on the rebased commits escalates and pushes nothing."""
    world.run_commit()
    theirs = world.remote_commit("other.txt", "theirs\n")
    with pytest.raises(EscalationError) as caught:
        world.publish(retest=lambda: False)
    assert caught.value.reason == "tests_red_after_rebase"
    assert world.remote_main() == theirs
    assert world.recorded == []


def test_push_race_is_rebased_retested_and_retried(world: World) -> None:
    """The remote moving between fetch and push is retried after another rebase and test."""
    world.run_commit()
    world.remote_commit("one.txt", "1\n")
    races = iter(["two.txt"])

    def retest() -> bool:
        name = next(races, None)
        if name is not None:
            world.remote_commit(name, "2\n")
        world.retests.append(git(world.worktree, "rev-parse", "HEAD"))
        return True

    result = world.publish(retest=retest)
    assert result.race_retries == 1
    assert len(world.retests) == 2
    assert world.remote_main() == result.pushed_sha
    assert git(world.remote, "show", "main:two.txt") == "2"


def test_push_race_gives_up_as_retryable_after_the_bound(world: World) -> None:
    """A remote that keeps moving makes the publish a retryable push_race after the bound."""
    world.run_commit()
    world.remote_commit("seed.txt", "0\n")
    counter = iter(range(100))

    def retest() -> bool:
        world.remote_commit(f"race{next(counter)}.txt", "x\n")
        return True

    with pytest.raises(RetryableError) as caught:
        world.publish(retest=retest, max_race_retries=2)
    assert caught.value.kind == "push_race"
    assert world.recorded == []
    assert git(world.worktree, "log", "-1", "--format=%(trailers:key=Afk-Run,valueonly)") == "1"


def test_crash_between_push_and_record_does_not_push_again(world: World) -> None:
    """A publish whose recording crashed is found by its trailer and recorded, not re-pushed."""
    world.run_commit()

    def crash(sha: str) -> None:
        raise KeyboardInterrupt("killed before the SHA was recorded")

    with pytest.raises(KeyboardInterrupt):
        world.publish(record=crash)
    pushed = world.remote_main()
    world.remote_commit("later.txt", "someone pushed on top\n")
    head_after = world.remote_main()
    result = world.publish()
    assert result.already_on_remote and result.pushed_sha == pushed
    assert world.recorded == [pushed]
    assert world.remote_main() == head_after
    assert any("already on" in message for _, message, _ in world.events.of_kind("publish"))


def test_branch_mode_pushes_the_run_branch_and_opens_a_pr(world: World) -> None:
    """Push mode branch pushes the run branch (never main) and asks for a pull request."""
    sha = world.run_commit()
    opened: list[tuple[str, str]] = []

    def open_pr(branch: str, title: str) -> str:
        opened.append((branch, title))
        return f"https://forge.invalid/pr/{len(opened)}"

    result = world.publish_as(world.repo(mode="branch"), open_pr=open_pr)
    assert result.branch == "afk/run-1" and result.pr_url == "https://forge.invalid/pr/1"
    assert git(world.remote, "rev-parse", "refs/heads/afk/run-1") == sha
    assert world.remote_main() == world.base_sha
    assert opened == [("afk/run-1", "Add feature.txt")]


def test_branch_mode_rebases_and_force_pushes_its_own_branch(world: World) -> None:
    """A second attempt of a run in branch mode replaces its own stale remote branch."""
    world.run_commit()
    git(world.worktree, "push", "-q", str(world.remote), "HEAD:refs/heads/afk/issue-9")
    git(world.worktree, "commit", "-q", "--amend", "-m", "Reworked\n\nAfk-Run: 2")
    world.run_id = 2
    world.remote_commit("other.txt", "theirs\n")
    result = world.publish_as(world.repo(mode="branch"), remote_branch="afk/issue-9")
    assert result.rebased and result.branch == "afk/issue-9"
    assert git(world.remote, "rev-parse", "refs/heads/afk/issue-9") == result.pushed_sha


def test_missing_trailer_refuses_to_push(world: World) -> None:
    """Commits without the run's trailer are never pushed: a crash could not be detected."""
    commit_file(world.worktree, "x.txt", "x\n", "no trailer here")
    with pytest.raises(Exception, match="Afk-Run: 1"):
        world.publish()
    assert world.remote_main() == world.base_sha


def test_a_file_over_the_size_limit_is_never_pushed(world: World) -> None:
    """A run that commits a file over max_file_bytes escalates naming it; nothing is pushed,
    also when a later commit of the run deletes the file (the history would carry it)."""
    world.run_commit("small.txt", "x" * 100)
    world.run_commit("artifact.bin", "\0" * 4096)
    repo = replace(world.repo(), max_file_bytes=2048)
    with pytest.raises(EscalationError) as caught:
        world.publish_as(repo)
    assert caught.value.reason == "file_too_large"
    assert "artifact.bin (0.0 MiB), over repos.demo.max_file_bytes" in str(caught.value)
    assert world.remote_main() == world.base_sha and world.recorded == []
    git(world.worktree, "rm", "-q", "artifact.bin")
    git(world.worktree, "commit", "-qm", "drop it\n\nAfk-Run: 1")
    with pytest.raises(EscalationError, match=r"artifact\.bin"):
        world.publish_as(repo)
    assert world.remote_main() == world.base_sha


def test_a_copied_file_the_agent_force_added_is_never_pushed(world: World) -> None:
    """An agent's ``git add -f .env`` of the operator's copied secret: escalated, not pushed."""
    (world.worktree / ".env").write_text("TOKEN=operator-secret\n")
    git(world.worktree, "add", "-f", ".env")
    git(world.worktree, "commit", "-qm", "add env\n\nAfk-Run: 1")
    copied = (CopyFile(source=world.tmp / "app.env", target="./.env"),)
    with pytest.raises(EscalationError) as caught:
        world.publish_as(replace(world.repo(), copy_files=copied))
    assert caught.value.reason == "copied_file_committed"
    assert ".env, a file repos.demo.copy_files copies into the tree" in str(caught.value)
    assert world.remote_main() == world.base_sha and world.recorded == []


def test_large_files_already_upstream_do_not_count(world: World) -> None:
    """Only what the run adds is measured: a colleague's large file is not the run's."""
    world.remote_commit("their-big.bin", "\0" * 4096)
    world.run_commit("small.txt", "x" * 100)
    result = world.publish_as(replace(world.repo(), max_file_bytes=2048))
    assert result.rebased and world.remote_main() == result.pushed_sha


def test_token_never_lands_in_config_or_events(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configured push token is used only through the environment of git commands."""
    sentinel = "sentinel-token-3f9c1d"
    monkeypatch.setenv("AFK_TEST_PUSH_TOKEN", sentinel)
    world.run_commit()
    from pipeline.config.settings import SecretRef

    repo = world.repo()
    repo = replace(repo, push=replace(repo.push, token=SecretRef(env="AFK_TEST_PUSH_TOKEN")))
    world.publish_as(repo)
    for config in (world.checkout / ".git").rglob("config*"):
        assert sentinel not in config.read_text(encoding="utf-8", errors="replace")
    assert sentinel not in repr(world.events.events)
    assert world.recorded == [world.remote_main()]


def test_unresolved_conflict_escalates_after_the_agent_attempts(world: World) -> None:
    """An agent that leaves the rebase half done is tried the configured times, then escalated."""
    mine = world.run_commit("README.md", "mine\n")
    world.remote_commit("README.md", "theirs\n")
    calls: list[str] = []

    def give_up(description: str) -> bool:
        calls.append(description)
        subprocess.run(
            ["git", "rebase", "origin/main"], cwd=world.worktree, capture_output=True, check=False
        )
        return False

    with pytest.raises(EscalationError) as caught:
        world.publish(resolve=give_up, conflict_agent_attempts=2)
    assert caught.value.reason == "conflict" and len(calls) == 2
    assert git(world.worktree, "rev-parse", "afk/run-1") == mine
    assert git(world.worktree, "status", "--porcelain") == ""


def test_checkout_hooks_never_run_with_credentials(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pre-push hook planted in the checkout does not run during the daemon's push."""
    monkeypatch.setenv("AFK_TEST_PUSH_TOKEN", "tok")
    witness = world.tmp / "hook-ran"
    hook = world.checkout / ".git" / "hooks" / "pre-push"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\nenv > {witness}\n", encoding="utf-8")
    hook.chmod(0o755)
    world.run_commit()
    from pipeline.config.settings import SecretRef

    repo = world.repo()
    repo = replace(repo, push=replace(repo.push, token=SecretRef(env="AFK_TEST_PUSH_TOKEN")))
    world.publish_as(repo)
    assert world.recorded == [world.remote_main()]
    assert not witness.exists()


def test_a_trailer_older_than_the_run_is_not_its_push(world: World) -> None:
    """A commit naming run 1 that was on main before run 1 started (an earlier history
    database's run 1) is not taken for run 1's push: its own commit is pushed."""
    world.remote_commit("earlier.txt", "x\n")
    git(world.other, "commit", "-q", "--amend", "-m", "earlier run\n\nAfk-Run: 1")
    git(world.other, "push", "-q", "-f", "origin", "HEAD:main")
    earlier = git(world.other, "rev-parse", "HEAD")
    git(world.worktree, "fetch", "-q", str(world.remote), "main")
    git(world.worktree, "reset", "-q", "--hard", "FETCH_HEAD")
    world.base_sha = earlier
    own = world.run_commit()
    result = world.publish()
    assert not result.already_on_remote
    assert world.remote_main() == own == result.pushed_sha
    assert find_pushed(world.checkout.parent / "mirror.git", "refs/heads/main", 1, earlier) == own
