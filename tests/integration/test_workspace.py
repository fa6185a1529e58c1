"""Workspaces on real git: warm slots, clean resets, debounced fetches, isolation."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from pipeline.config.settings import CopyFile, RepoSettings, WorkspaceSettings
from pipeline.core.errors import (
    CancelRequested,
    ConfigError,
    EscalationError,
    FatalError,
    RetryableError,
)
from pipeline.core.proc import StopToken
from pipeline.testing.clock import ManualClock
from pipeline.testing.gitrepos import commit_to_remote, git, make_remote, remote_sha
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

# Creates the dependency dirs once; a warm run finds them and leaves them alone.
WARM_SETUP = (
    "if [ ! -f .venv/made ]; then mkdir -p .venv node_modules/pkg && "
    "echo $$ > .venv/made && echo dep > node_modules/pkg/index.js; fi"
)
NODE_SETUP = "test -d node_modules || { mkdir node_modules; echo $$ > node_modules/id; }"
BASE_FILES = {
    "README.md": "hello\n",
    "src/app.py": "print('app')\n",
    ".gitignore": ".venv/\nnode_modules/\nbuild/\n",
}


@pytest.fixture
def clock() -> ManualClock:
    """A clock standing still until the test advances it."""
    return ManualClock(now=1000.0)


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    """An empty volume directory."""
    path = tmp_path / "volume"
    path.mkdir()
    return path


@pytest.fixture
def workspaces(volume: Path, clock: ManualClock) -> Workspaces:
    """Workspaces on the volume, fetch debounce 30 s on the fake clock."""
    return Workspaces(volume, WorkspaceSettings(fetch_debounce_s=30.0), clock=clock)


def make_repo(tmp_path: Path, name: str = "app", **overrides: object) -> RepoSettings:
    """A repo backed by a fresh bare remote holding BASE_FILES."""
    files = overrides.pop("files", BASE_FILES)
    url = make_remote(tmp_path, files, name=name)  # type: ignore[arg-type]
    fields: dict[str, object] = {
        "name": name,
        "tracker": "gh",
        "slug": f"acme/{name}",
        "remote_url": url,
        "setup_commands": (WARM_SETUP,),
    }
    fields.update(overrides)
    return RepoSettings(**fields)  # type: ignore[arg-type]


def prepare(ws: Workspaces, repo: RepoSettings, run_id: int, **kw: object) -> PreparedWorkspace:
    """Prepare with the test environment and a recording sink."""
    sink = kw.pop("events", RecordingSink())
    return ws.prepare(
        repo, run_id=run_id, issue_ref=f"#{run_id}", base_env=dict(os.environ), events=sink, **kw
    )  # type: ignore[arg-type]


def status(path: Path) -> str:
    """``git status --porcelain --ignored`` of a tree, minus the kept dependency dirs."""
    out = git(path, "status", "--porcelain", "--ignored")
    kept = ("!! .venv/", "!! node_modules/")
    return "\n".join(line for line in out.splitlines() if line not in kept)


def test_second_run_starts_warm_with_none_of_the_first_runs_edits(
    tmp_path: Path, workspaces: Workspaces, clock: ManualClock
) -> None:
    """Run N+1 finds run N's .venv/node_modules and none of its tracked/untracked edits."""
    repo = make_repo(tmp_path)
    first = prepare(workspaces, repo, 1)
    made = (first.path / ".venv" / "made").read_text()
    (first.path / "README.md").write_text("edited by run 1\n")
    (first.path / "new_file.py").write_text("x = 1\n")
    (first.path / "build").mkdir()
    (first.path / "build" / "out.o").write_text("obj")
    git(first.path, "add", "README.md")
    git(first.path, "commit", "-q", "-m", "run 1 edit")
    (first.path / "src" / "app.py").write_text("staged edit\n")
    git(first.path, "add", "src/app.py")
    workspaces.release(first, succeeded=True)

    newer = commit_to_remote(repo.remote_url, {"CHANGES": "v2\n"}, "upstream change")
    clock.now += 31
    second = prepare(workspaces, repo, 2)

    assert second.path == first.path
    assert (second.path / ".venv" / "made").read_text() == made
    assert (second.path / "node_modules" / "pkg" / "index.js").read_text() == "dep\n"
    assert (second.path / "README.md").read_text() == "hello\n"
    assert (second.path / "src" / "app.py").read_text() == "print('app')\n"
    assert not (second.path / "new_file.py").exists()
    assert not (second.path / "build").exists()
    assert status(second.path) == ""
    assert second.base_sha == newer == git(second.path, "rev-parse", "HEAD").strip()
    assert git(second.path, "branch", "--show-current").strip() == "afk/2-2"
    branches = git(second.path, "branch", "--list", "afk/*")
    assert "afk/1-1" not in branches


def test_a_broken_slot_is_rebuilt_keeping_its_dependency_dirs(
    tmp_path: Path, workspaces: Workspaces
) -> None:
    """A slot whose git registration vanished is rebuilt clean, with .venv carried over."""
    repo = make_repo(tmp_path)
    first = prepare(workspaces, repo, 1)
    made = (first.path / ".venv" / "made").read_text()
    (first.path / "stray.txt").write_text("left over")
    workspaces.release(first, succeeded=True)
    registration = workspaces.repo_dir(repo) / "checkout" / ".git" / "worktrees" / "slot-0"
    subprocess.run(["rm", "-rf", str(registration)], check=True)
    second = prepare(workspaces, repo, 2)
    assert second.path == first.path
    assert (second.path / ".venv" / "made").read_text() == made
    assert not (second.path / "stray.txt").exists()
    assert status(second.path) == ""


def test_fetches_are_debounced(tmp_path: Path, workspaces: Workspaces, clock: ManualClock) -> None:
    """A burst of runs shares one fetch; after the debounce a fetch sees new commits."""
    repo = make_repo(tmp_path)
    first = prepare(workspaces, repo, 1)
    workspaces.release(first, succeeded=True)
    assert workspaces.fetch_count(repo) == 1  # the clone
    newer = commit_to_remote(repo.remote_url, {"later.txt": "x\n"}, "later")
    for run_id in (2, 3):
        clock.now += 5
        ws = prepare(workspaces, repo, run_id)
        assert ws.base_sha == first.base_sha
        workspaces.release(ws, succeeded=True)
    assert workspaces.fetch_count(repo) == 1
    clock.now += 30
    ws = prepare(workspaces, repo, 4)
    assert workspaces.fetch_count(repo) == 2
    assert ws.base_sha == newer


def _run_in_repo(ws: Workspaces, repo: RepoSettings, marker: str, errors: list[str]) -> None:
    try:
        for run_id in range(1, 4):
            prepared = ws.prepare(
                repo,
                run_id=run_id,
                issue_ref=f"{marker}-{run_id}",
                base_env=dict(os.environ),
                events=RecordingSink(),
            )
            (prepared.path / f"{marker}-{run_id}.txt").write_text(marker)
            git(prepared.path, "add", "-A")
            git(prepared.path, "commit", "-q", "-m", f"{marker} run {run_id}")
            git(prepared.path, "push", "-q", "origin", "HEAD:refs/heads/main")
            ws.release(prepared, succeeded=True)
    except Exception as exc:
        errors.append(f"{marker}: {exc!r}")


def test_runs_in_two_repos_at_once_do_not_interfere(tmp_path: Path, volume: Path) -> None:
    """Threads preparing, committing and pushing in two repos see only their own repo."""
    ws = Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0.0))
    alpha = make_repo(tmp_path, "alpha")
    beta = make_repo(tmp_path, "beta")
    errors: list[str] = []
    threads = [
        threading.Thread(target=_run_in_repo, args=(ws, r, r.name, errors)) for r in (alpha, beta)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=100)
    assert errors == []
    for repo, other in ((alpha, "beta"), (beta, "alpha")):
        files = git(Path(repo.remote_url), "ls-tree", "-r", "--name-only", "main").split()
        assert {f for f in files if f.endswith(".txt")} == {
            f"{repo.name}-{i}.txt" for i in (1, 2, 3)
        }
        log = git(Path(repo.remote_url), "log", "--format=%s", "main")
        assert other not in log
        assert log.count(f"{repo.name} run") == 3
    assert ws.repo_dir(alpha) != ws.repo_dir(beta)


def test_two_daemons_on_one_volume_clone_a_repo_once(tmp_path: Path, volume: Path) -> None:
    """Two Workspaces (as two processes would) racing on one repo share one mirror and checkout."""
    repo = make_repo(tmp_path)
    daemons = [Workspaces(volume, WorkspaceSettings()) for _ in range(2)]
    checkouts: list[Path] = []
    errors: list[str] = []

    def ensure(ws: Workspaces) -> None:
        try:
            checkouts.append(ws.ensure_checkout(repo))
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=ensure, args=(ws,)) for ws in daemons]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and len(set(checkouts)) == 1
    made = {p.name for p in checkouts[0].parent.iterdir() if p.name != "worktrees"}
    assert made == {"checkout", "checkout.gitconfig", "mirror.git", ".lock"}
    assert sorted(ws.fetch_count(repo) for ws in daemons) == [1, 1]


def test_layout_sanitises_forge_owner_and_name(tmp_path: Path, workspaces: Workspaces) -> None:
    """Hostile tracker names and slugs stay under <volume>/repos and give a valid branch."""
    repo = make_repo(tmp_path, tracker="../../etc", slug="../..//.git/..lock")
    root = workspaces.repos_root.resolve()
    repo_dir = workspaces.repo_dir(repo)
    assert root in repo_dir.resolve().parents
    assert all(part not in {"..", ".", ".git"} for part in repo_dir.relative_to(root).parts)
    ws = workspaces.prepare(
        repo,
        run_id=7,
        issue_ref="../x..y @{evil}~^:?*[\\ .lock",
        base_env=dict(os.environ),
        events=RecordingSink(),
    )
    subprocess.run(["git", "check-ref-format", f"refs/heads/{ws.branch}"], check=True)
    assert ws.branch.startswith("afk/") and ws.branch.endswith("-7")
    assert root in ws.path.resolve().parents


def test_copy_files_are_present_and_never_committed(tmp_path: Path, workspaces: Workspaces) -> None:
    """A copied .env is in the worktree, excluded from git, and back in the next run."""
    secret = tmp_path / "secrets" / "app.env"
    secret.parent.mkdir()
    secret.write_text("TOKEN=abc\n")
    repo = make_repo(tmp_path, copy_files=(CopyFile(source=secret, target="config/.env"),))
    ws = prepare(workspaces, repo, 1)
    assert (ws.path / "config" / ".env").read_text() == "TOKEN=abc\n"
    git(ws.path, "add", "-A")
    assert git(ws.path, "status", "--porcelain") == ""
    workspaces.release(ws, succeeded=True)
    again = prepare(workspaces, repo, 2)
    assert (again.path / "config" / ".env").read_text() == "TOKEN=abc\n"


@pytest.mark.parametrize("target", [".env", "./.env", ".config/app.env"])
def test_a_copied_dotfile_is_never_committed_by_git_add_all(
    tmp_path: Path, workspaces: Workspaces, target: str
) -> None:
    """``git add -A`` (what an agent types) leaves a copied ``.env`` out, at any spelling."""
    secret = tmp_path / "app.env"
    secret.write_text("TOKEN=abc\n")
    repo = make_repo(tmp_path, copy_files=(CopyFile(source=secret, target=target),))
    ws = prepare(workspaces, repo, 1)
    git(ws.path, "add", "-A")
    assert git(ws.path, "status", "--porcelain") == ""


def test_copy_files_onto_a_tracked_file_is_refused(tmp_path: Path, workspaces: Workspaces) -> None:
    """A target the repository tracks would be staged with the agent's work: refused, named."""
    secret = tmp_path / "app.env"
    secret.write_text("TOKEN=abc\n")
    repo = make_repo(
        tmp_path,
        files={".env": "TOKEN=changeme\n"},
        copy_files=(CopyFile(source=secret, target="./.env"),),
    )
    with pytest.raises(FatalError, match=r"copy_files: the repository tracks \./\.env"):
        prepare(workspaces, repo, 1)
    assert not any(p.read_text() == "TOKEN=abc\n" for p in workspaces.volume.rglob(".env"))


def test_setup_runs_in_the_workdir_with_cache_env(tmp_path: Path, workspaces: Workspaces) -> None:
    """Setup runs in the monorepo workdir, sees the cache env, and its time is an event."""
    repo = make_repo(
        tmp_path,
        files={"packages/app/README": "app\n"},
        workdir="packages/app",
        setup_commands=('pwd > where && echo "$PIP_CACHE_DIR $GOMODCACHE" > caches',),
    )
    sink = RecordingSink()
    ws = prepare(workspaces, repo, 1, events=sink)
    assert ws.workdir == ws.path / "packages" / "app"
    assert Path((ws.workdir / "where").read_text().strip()) == ws.workdir.resolve()
    env = workspaces.cache_env(repo)
    assert (ws.workdir / "caches").read_text().split() == [env["PIP_CACHE_DIR"], env["GOMODCACHE"]]
    assert ws.setup_s > 0
    setup_events = sink.of_kind("setup")
    assert any(e[2].get("command") == repo.setup_commands[0] for e in setup_events)
    assert any("setup_s" in e[2] for e in setup_events)


def test_nested_dependency_dirs_of_a_monorepo_workdir_stay_warm(
    tmp_path: Path, workspaces: Workspaces
) -> None:
    """node_modules inside the workdir survives the reset; other untracked files do not."""
    repo = make_repo(
        tmp_path,
        files={"web/package.json": "{}\n"},
        workdir="web",
        setup_commands=(NODE_SETUP,),
    )
    first = prepare(workspaces, repo, 1)
    made = (first.workdir / "node_modules" / "id").read_text()
    (first.workdir / "dist").mkdir()
    workspaces.release(first, succeeded=True)
    second = prepare(workspaces, repo, 2)
    assert (second.workdir / "node_modules" / "id").read_text() == made
    assert not (second.workdir / "dist").exists()


def test_unknown_strategy_is_a_config_error(tmp_path: Path, workspaces: Workspaces) -> None:
    """A workspace strategy other than worktree/clone fails naming the setting."""
    repo = make_repo(tmp_path, workspace="docker")
    with pytest.raises(FatalError, match=r"repos\.app\.workspace 'docker'"):
        prepare(workspaces, repo, 1)


def test_cache_env_points_every_tool_under_the_repos_own_cache(
    tmp_path: Path, workspaces: Workspaces
) -> None:
    """Every package manager's cache variable is a directory of the repo's own,
    under <volume>/cache/repos/<repo>: no two repos share one."""
    app, web = make_repo(tmp_path), make_repo(tmp_path, "web")
    env = workspaces.cache_env(app)
    expected = {
        "PIP_CACHE_DIR",
        "UV_CACHE_DIR",
        "npm_config_cache",
        "npm_config_store_dir",
        "YARN_CACHE_FOLDER",
        "CARGO_HOME",
        "GOMODCACHE",
        "GOCACHE",
        "GRADLE_USER_HOME",
    }
    assert expected <= set(env)
    for value in env.values():
        assert Path(value).is_dir()
        assert Path(value).parent == workspaces.cache_root / "repos" / "app"
    assert not set(env.values()) & set(workspaces.cache_env(web).values())


def test_shared_cache_scope_gives_every_repo_the_same_caches(tmp_path: Path, volume: Path) -> None:
    """``[workspace] cache_scope = "shared"``: every repo's caches are <volume>/cache/<tool>."""
    ws = Workspaces(volume, WorkspaceSettings(cache_scope="shared"))
    env = ws.cache_env(make_repo(tmp_path))
    assert env == ws.cache_env(make_repo(tmp_path, "web"))
    assert env["PIP_CACHE_DIR"] == str(ws.cache_root / "pip")


def test_missing_workdir_is_a_fatal_config_error(tmp_path: Path, workspaces: Workspaces) -> None:
    """A workdir that does not exist in the repo fails the run naming the setting."""
    repo = make_repo(tmp_path, workdir="services/api")
    with pytest.raises(FatalError, match=r"repos\.app\.workdir 'services/api'"):
        prepare(workspaces, repo, 1)


def test_failing_setup_escalates_with_output(tmp_path: Path, workspaces: Workspaces) -> None:
    """A setup command that fails escalates as setup_failed with its output tail."""
    repo = make_repo(tmp_path, setup_commands=("echo resolver exploded >&2; exit 3",))
    with pytest.raises(EscalationError) as info:
        prepare(workspaces, repo, 1)
    assert info.value.reason == "setup_failed"
    assert "exited 3" in str(info.value) and "resolver exploded" in str(info.value)


def test_failed_preparation_frees_the_slot(tmp_path: Path, workspaces: Workspaces) -> None:
    """After a setup failure the next run of the repo reuses slot-0."""
    repo = make_repo(tmp_path, setup_commands=("test -f marker || { touch marker; exit 1; }",))
    with pytest.raises(EscalationError):
        prepare(workspaces, repo, 1)
    fixed = RepoSettings(**{**repo.__dict__, "setup_commands": ("true",)})
    ws = prepare(workspaces, fixed, 2)
    assert ws.path.name == "slot-0"


def test_disk_full_in_setup_is_retryable_and_evicts(tmp_path: Path, volume: Path) -> None:
    """'No space left on device' from setup fails retryable (disk_full) and evicts caches."""
    ws = Workspaces(volume, WorkspaceSettings(capacity_bytes=1))
    repo = make_repo(tmp_path, setup_commands=("echo 'write: No space left on device'; exit 1",))
    cached = Path(ws.cache_env(repo)["PIP_CACHE_DIR"]) / "http" / "blob"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"x" * 10_000)
    with pytest.raises(RetryableError) as info:
        prepare(ws, repo, 1)
    assert info.value.kind == "disk_full"
    assert "No space left" in str(info.value) or "no space left" in str(info.value)
    assert not cached.exists()
    assert ws.last_eviction is not None and cached in ws.last_eviction.evicted


def test_stop_before_setup_cancels(tmp_path: Path, workspaces: Workspaces) -> None:
    """A run stopped before setup raises CancelRequested and runs no setup command."""
    repo = make_repo(tmp_path, setup_commands=("touch ran",))
    stop = StopToken()
    stop.stop("cancel requested by a human")
    with pytest.raises(CancelRequested):
        prepare(workspaces, repo, 1, stop=stop)
    assert not (workspaces.repo_dir(repo) / "worktrees" / "slot-0" / "ran").exists()


def test_volume_must_exist_and_be_a_directory(tmp_path: Path) -> None:
    """A missing volume or a file in its place is a ConfigError naming the path."""
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="does not exist"):
        Workspaces(missing, WorkspaceSettings())
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        Workspaces(a_file, WorkspaceSettings())


def test_clone_failure_is_retryable_and_redacts_credentials(
    tmp_path: Path, workspaces: Workspaces
) -> None:
    """An unreachable remote fails retryable (git_fetch) without echoing the token."""
    repo = RepoSettings(
        name="gone",
        tracker="gh",
        slug="acme/gone",
        remote_url=f"file://user:s3cret@{tmp_path}/missing.git",
    )
    with pytest.raises(RetryableError) as info:
        prepare(workspaces, repo, 1)
    assert info.value.kind == "git_fetch"
    assert "s3cret" not in str(info.value)


def test_remote_sha_helper_matches_prepared_base(tmp_path: Path, workspaces: Workspaces) -> None:
    """The prepared base is the remote default branch's SHA."""
    repo = make_repo(tmp_path)
    ws = prepare(workspaces, repo, 1)
    assert ws.base_sha == remote_sha(repo.remote_url)


def _bisecting(path: Path) -> None:
    """Leave a bisect under way: a commit marked bad, ``HEAD`` moved to one to test."""
    base = git(path, "rev-parse", "HEAD").strip()
    for text in ("one\n", "two\n"):
        (path / "README.md").write_text(text)
        git(path, "commit", "-qam", text.strip())
    git(path, "bisect", "start", "-q", "HEAD", base)
    assert "bisecting" in git(path, "status")


def _conflict(path: Path, *command: str) -> None:
    """Leave ``command`` (merge, cherry-pick, rebase) stopped on a conflict in README.md."""
    base = git(path, "rev-parse", "HEAD").strip()
    git(path, "checkout", "-q", "-b", "theirs")
    (path / "README.md").write_text("theirs\n")
    git(path, "commit", "-qam", "theirs")
    (path / "src" / "app.py").write_text("theirs\n")
    git(path, "commit", "-qam", "theirs again")
    git(path, "checkout", "-q", "--detach", base)
    (path / "README.md").write_text("ours\n")
    git(path, "commit", "-qam", "ours")
    with pytest.raises(RuntimeError):
        git(path, *(arg.replace("BASE", base) for arg in command))
    assert "UU README.md" in git(path, "status", "--porcelain")


def _replace_with_dir(path: Path) -> None:
    (path / "README.md").unlink()
    (path / "README.md").mkdir()
    (path / "README.md" / "inner.txt").write_text("a directory now\n")
    subprocess.run(["rm", "-rf", str(path / "src")], check=True)
    (path / "src").write_text("a file now\n")


def _replace_with_symlink(path: Path) -> None:
    (path / "README.md").unlink()
    (path / "README.md").symlink_to("/etc/hostname")


def _stale_index_lock(path: Path) -> None:
    (Path(git(path, "rev-parse", "--absolute-git-dir").strip()) / "index.lock").write_text("")


HOSTILE = {
    "modified": lambda p: (p / "README.md").write_text("edited\n"),
    "staged": lambda p: ((p / "src" / "app.py").write_text("staged\n"), git(p, "add", "-A")),
    "deleted": lambda p: (p / "README.md").unlink(),
    "deleted_staged": lambda p: git(p, "rm", "-q", "src/app.py"),
    "new_file_staged": lambda p: ((p / "added.py").write_text("1\n"), git(p, "add", "added.py")),
    "executable_bit": lambda p: (p / "src" / "app.py").chmod(0o755),
    "merge_conflict": lambda p: _conflict(p, "merge", "theirs"),
    "cherry_pick_conflict": lambda p: _conflict(p, "cherry-pick", "theirs~1"),
    "cherry_pick_range_conflict": lambda p: _conflict(p, "cherry-pick", "BASE..theirs"),
    "rebase_conflict": lambda p: _conflict(p, "rebase", "theirs"),
    "stale_index_lock": _stale_index_lock,
    "bisecting": _bisecting,
    "file_dir_swapped": _replace_with_dir,
    "file_made_symlink": _replace_with_symlink,
}


@pytest.mark.parametrize("state", sorted(HOSTILE))
def test_a_slot_left_in_a_hostile_state_is_prepared_exactly_at_the_base(
    tmp_path: Path, workspaces: Workspaces, clock: ManualClock, state: str
) -> None:
    """Whatever git state a run's processes left in the slot, the next run starts at the base."""
    repo = make_repo(tmp_path)
    first = prepare(workspaces, repo, 1)
    made = (first.path / ".venv" / "made").read_text()
    workspaces.release(first, succeeded=True)
    HOSTILE[state](first.path)  # a process of run 1 outlived it, or git was killed
    newer = commit_to_remote(repo.remote_url, {"CHANGES": "v2\n"}, "upstream change")
    clock.now += 31
    second = prepare(workspaces, repo, 2)

    assert second.path == first.path
    assert (second.path / ".venv" / "made").read_text() == made
    assert status(second.path) == ""
    assert git(second.path, "rev-parse", "HEAD").strip() == newer == second.base_sha
    assert git(second.path, "branch", "--show-current").strip() == "afk/2-2"
    assert (second.path / "README.md").read_text() == "hello\n"
    assert not (second.path / "README.md").is_symlink()
    assert (second.path / "src" / "app.py").read_text() == "print('app')\n"
    admin = Path(git(second.path, "rev-parse", "--absolute-git-dir").strip())
    leftovers = {"MERGE_HEAD", "CHERRY_PICK_HEAD", "REBASE_HEAD", "index.lock"}
    leftovers |= {"sequencer", "rebase-merge", "rebase-apply", "BISECT_START", "BISECT_LOG"}
    assert sorted(leftovers & {p.name for p in admin.iterdir()}) == []
    assert not (admin / "refs" / "bisect").exists()
    assert "bisect" not in git(second.path, "status")


def test_a_sha256_repository_keeps_a_sha256_checkout_across_prepares(
    tmp_path: Path, workspaces: Workspaces, clock: ManualClock
) -> None:
    """The checkout's config carries the mirror's object format on every prepare."""
    seed = tmp_path / "seed"
    git(tmp_path, "init", "-q", "--object-format=sha256", "--initial-branch=main", str(seed))
    for name, text in BASE_FILES.items():
        (seed / name).parent.mkdir(parents=True, exist_ok=True)
        (seed / name).write_text(text)
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "initial commit")
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(tmp_path / "sha256.git"))
    repo = make_repo(tmp_path, remote_url=str(tmp_path / "sha256.git"))
    first = prepare(workspaces, repo, 1)
    workspaces.release(first, succeeded=True)
    newer = commit_to_remote(repo.remote_url, {"CHANGES": "v2\n"}, "upstream change")
    clock.now += 31
    second = prepare(workspaces, repo, 2)

    assert len(newer) == 64 and second.base_sha == newer
    assert git(second.path, "rev-parse", "HEAD").strip() == newer
    assert git(second.path, "rev-parse", "--show-object-format").strip() == "sha256"
    config = (workspaces.repo_dir(repo) / "checkout.gitconfig").read_text()
    assert "objectformat = sha256" in config
    assert status(second.path) == ""


@pytest.mark.parametrize("succeeded", [True, False])
def test_a_run_that_left_a_conflicted_merge_still_gives_its_slot_back(
    tmp_path: Path, workspaces: Workspaces, clock: ManualClock, succeeded: bool
) -> None:
    """Release detaches a slot whose index is unmerged; the next run starts at the base."""
    repo = make_repo(tmp_path)
    first = prepare(workspaces, repo, 1)
    _conflict(first.path, "merge", "theirs")  # the agent stopped mid-merge
    workspaces.release(first, succeeded=succeeded)
    assert git(first.path, "branch", "--show-current").strip() == ""  # detached
    clock.now += 31
    second = prepare(workspaces, repo, 2)
    assert status(second.path) == ""
    assert git(second.path, "rev-parse", "HEAD").strip() == second.base_sha
