"""Real git remotes for tests: a bare repository with an initial commit, and pushes to it."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

_IDENTITY = (
    "-c",
    "user.name=afk test",
    "-c",
    "user.email=afk@test.invalid",
    "-c",
    "commit.gpgsign=false",
)


def git(cwd: Path, *args: str, input_data: bytes | None = None) -> str:
    """Run git in ``cwd`` with a fixed identity; return stdout, raise on failure."""
    proc = subprocess.run(
        ["git", *_IDENTITY, *args],
        cwd=cwd,
        input=input_data or b"",
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} in {cwd} failed: {proc.stderr.decode(errors='replace')}"
        )
    return proc.stdout.decode("utf-8", errors="replace")


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Write ``files`` (relative path -> text or bytes) under ``root``."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def make_remote(
    tmp: Path, files: Mapping[str, str | bytes], branch: str = "main", name: str = "remote"
) -> str:
    """A bare repository under ``tmp`` whose ``branch`` holds ``files``; returns its URL."""
    bare = tmp / f"{name}.git"
    subprocess.run(
        ["git", "init", "--bare", "--quiet", f"--initial-branch={branch}", str(bare)],
        check=True,
        capture_output=True,
    )
    with tempfile.TemporaryDirectory(dir=tmp) as work:
        root = Path(work)
        git(root, "init", "--quiet", f"--initial-branch={branch}")
        write_files(root, files)
        git(root, "add", "-A")
        git(root, "commit", "--quiet", "--allow-empty", "-m", "initial commit")
        git(root, "push", "--quiet", str(bare), f"HEAD:refs/heads/{branch}")
    return str(bare)


def commit_to_remote(
    url: str, files: Mapping[str, str | bytes], message: str, branch: str = "main"
) -> str:
    """Commit ``files`` on top of ``branch`` of the remote at ``url``; returns the new SHA."""
    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "clone"
        subprocess.run(
            ["git", "clone", "--quiet", "--branch", branch, url, str(root)],
            check=True,
            capture_output=True,
        )
        write_files(root, files)
        git(root, "add", "-A")
        git(root, "commit", "--quiet", "-m", message)
        git(root, "push", "--quiet", "origin", f"HEAD:refs/heads/{branch}")
        return git(root, "rev-parse", "HEAD").strip()


def remote_sha(url: str, branch: str = "main") -> str:
    """The SHA ``branch`` points at in the remote."""
    return git(Path(url), "rev-parse", f"refs/heads/{branch}").strip()
