"""The clone strategy with the real git-crypt: plaintext in the run, ciphertext in the remote."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings, SecretRef, WorkspaceSettings
from pipeline.core.errors import FatalError
from pipeline.testing.gitrepos import git, write_files
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

# Read at import: the autouse clean_env fixture clears PIPELINE_* before each test.
REQUIRE_TOOLS = os.environ.get("PIPELINE_TEST_REQUIRE_TOOLS") == "1"
GITCRYPT_MAGIC = b"\x00GITCRYPT"
SECRET = "API_KEY=plaintext-value\n"


@pytest.fixture(autouse=True)
def need_git_crypt() -> None:
    """Skip without git-crypt, or fail when PIPELINE_TEST_REQUIRE_TOOLS=1."""
    if shutil.which("git-crypt") is not None:
        return
    message = "git-crypt is not installed (Debian: apt-get install git-crypt)"
    if REQUIRE_TOOLS:
        pytest.fail(message + "; PIPELINE_TEST_REQUIRE_TOOLS=1 makes this a failure")
    pytest.skip(message)


def encrypted_remote(tmp_path: Path) -> tuple[str, Path]:
    """A bare remote whose secrets.env is git-crypt encrypted, and the exported key file."""
    bare = tmp_path / "crypt.git"
    subprocess.run(["git", "init", "--bare", "-q", "--initial-branch=main", str(bare)], check=True)
    work = tmp_path / "author"
    work.mkdir()
    git(work, "init", "-q", "--initial-branch=main")
    subprocess.run(["git-crypt", "init"], cwd=work, check=True, capture_output=True)
    write_files(
        work,
        {
            ".gitattributes": "secrets.env filter=git-crypt diff=git-crypt\n",
            ".gitignore": ".venv/\n",
            "secrets.env": SECRET,
            "app.py": "print('hi')\n",
        },
    )
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "initial with an encrypted file")
    git(work, "push", "-q", str(bare), "HEAD:refs/heads/main")
    key = tmp_path / "keys" / "crypt.key"
    key.parent.mkdir()
    subprocess.run(["git-crypt", "export-key", str(key)], cwd=work, check=True)
    return str(bare), key


def in_remote(url: str, path: str) -> bytes:
    """The raw blob of ``path`` on main of the bare remote."""
    return subprocess.run(
        ["git", "show", f"main:{path}"], cwd=url, check=True, capture_output=True
    ).stdout


def prepare(ws: Workspaces, repo: RepoSettings, run_id: int) -> PreparedWorkspace:
    """Prepare one run with the test's environment."""
    return ws.prepare(
        repo,
        run_id=run_id,
        issue_ref=str(run_id),
        base_env=dict(os.environ),
        events=RecordingSink(),
    )


def crypt_repo(url: str, key: SecretRef) -> RepoSettings:
    """A git-crypt repo using the clone strategy."""
    return RepoSettings(
        name="crypt",
        tracker="gh",
        slug="acme/crypt",
        remote_url=url,
        workspace="clone",
        git_crypt_key=key,
        setup_commands=("test -d .venv || { mkdir .venv; echo $$ > .venv/id; }",),
    )


def test_encrypted_file_is_plaintext_in_the_clone_and_stays_encrypted_after_push(
    tmp_path: Path,
) -> None:
    """The run's clone is unlocked; a commit pushed from it leaves secrets encrypted."""
    url, key = encrypted_remote(tmp_path)
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    run = prepare(ws, crypt_repo(url, SecretRef(file=key)), 1)

    assert run.strategy == "clone"
    assert (run.path / "secrets.env").read_text() == SECRET
    assert in_remote(url, "secrets.env").startswith(GITCRYPT_MAGIC)
    assert git(run.path, "remote", "get-url", "origin").strip() == url
    assert git(run.path, "rev-parse", "main", "origin/main").split() == [run.base_sha] * 2

    (run.path / "secrets.env").write_text(SECRET + "NEW=also-secret\n")
    (run.path / "app.py").write_text("print('changed')\n")
    git(run.path, "commit", "-qam", "change code and a secret")
    git(run.path, "push", "-q", "origin", "HEAD:refs/heads/main")

    blob = in_remote(url, "secrets.env")
    assert blob.startswith(GITCRYPT_MAGIC) and b"also-secret" not in blob
    assert in_remote(url, "app.py") == b"print('changed')\n"


def test_clone_is_removed_after_the_run_and_dependency_dirs_carry_over(tmp_path: Path) -> None:
    """Release deletes the decrypted clone; the next run gets the same .venv back."""
    url, key = encrypted_remote(tmp_path)
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0))
    key_var = "AFK_TEST_CRYPT_KEY_PATH"
    os.environ[key_var] = str(key)
    try:
        repo = crypt_repo(url, SecretRef(env=key_var))
        first = prepare(ws, repo, 1)
        venv_id = (first.path / ".venv" / "id").read_text()
        (first.path / "scratch.txt").write_text("leftover")
        ws.release(first, succeeded=True)
        assert not first.path.exists()
        second = prepare(ws, repo, 2)
    finally:
        del os.environ[key_var]
    assert (second.path / ".venv" / "id").read_text() == venv_id
    assert not (second.path / "scratch.txt").exists()
    assert (second.path / "secrets.env").read_text() == SECRET


def test_missing_key_file_is_a_fatal_config_error(tmp_path: Path) -> None:
    """A git_crypt_key pointing at no file fails naming the setting, and leaves no clone."""
    url, _key = encrypted_remote(tmp_path)
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = crypt_repo(url, SecretRef(file=tmp_path / "no-such.key"))
    with pytest.raises(FatalError, match=r"repos\.crypt\.git_crypt_key"):
        prepare(ws, repo, 1)
    assert not (ws.repo_dir(repo) / "worktrees" / "clone").exists()
