"""The repo's own ``.afk.toml``, read from the daemon's mirror at the run's base commit.

The file is read from the commit of the default branch the run starts from,
in the daemon-owned bare mirror (fetched from the remote; nothing the agent
runs can write it), never from the agent's worktree: a file the agent writes
during a run changes nothing for that run, and reaches a later run only by
being pushed to the default branch, where it is repository content like the
tests themselves (ADR 0023). What the file may set is decided by
``pipeline.config.repo_file``.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config.repo_file import MAX_FILE_BYTES, REPO_FILE, RepoFileReport, apply_repo_file
from pipeline.config.settings import RepoSettings
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner

REGULAR_FILE_MODES = ("100644", "100755")


def read_repo_file(mirror: Path, commit: str) -> tuple[bytes | None, str | None]:
    """``.afk.toml`` at ``commit`` in the mirror: ``(bytes or None, problem or None)``."""
    runner = GitRunner(GitRepo.mirror(mirror))
    listed = runner.run("ls-tree", "-l", "--full-tree", commit, "--", REPO_FILE)
    if not listed.ok:
        return None, f"{REPO_FILE}: cannot list {commit[:12]}: {listed.tail(3)}"
    line = listed.stdout.strip()
    if not line:
        return None, None
    meta, _, _name = line.partition("\t")
    parts = meta.split()
    if len(parts) != 4 or parts[1] != "blob" or parts[0] not in REGULAR_FILE_MODES:
        return None, f"{REPO_FILE}: not a regular file at the root of the default branch"
    if not parts[3].isdigit() or int(parts[3]) > MAX_FILE_BYTES:
        return None, f"{REPO_FILE}: {parts[3]} bytes; at most {MAX_FILE_BYTES} are read"
    shown = runner.run("cat-file", "blob", parts[2])
    if not shown.ok:
        return None, f"{REPO_FILE}: cannot read {parts[2][:12]}: {shown.tail(3)}"
    return shown.stdout.encode("utf-8"), None


def repo_settings(
    repo: RepoSettings, mirror: Path, commit: str
) -> tuple[RepoSettings, RepoFileReport]:
    """``repo`` as this run sees it: the daemon's settings, then what ``.afk.toml`` may add."""
    raw, problem = read_repo_file(mirror, commit)
    effective, report = apply_repo_file(repo, raw)
    if problem is not None:
        report = RepoFileReport(report.applied, report.overridden, (problem, *report.problems))
    return effective, report
