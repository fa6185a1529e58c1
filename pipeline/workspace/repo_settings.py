"""The repo's own ``.afk.toml``, read from the daemon's mirror, as a human last wrote it.

The file is read from the default branch the run starts from, in the
daemon-owned bare mirror (fetched from the remote; nothing the agent runs can
write it), never from the agent's worktree. And a run's agent may write the
file too, and its commit is pushed to that branch: so the version used is the
one of the newest commit that changed it without an ``Afk-Run`` trailer, i.e.
not pushed by a run (the mirror refuses to push any run commit without one).
A change an agent made waits for a human's commit to confirm it (ADR 0026).
What the file may set is decided by ``pipeline.config.repo_file``.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config.repo_file import MAX_FILE_BYTES, REPO_FILE, RepoFileReport, apply_repo_file
from pipeline.config.settings import RepoSettings
from pipeline.core.states import TRAILER
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner

REGULAR_FILE_MODES = ("100644", "100755")
SEARCH_DEPTH = 200


def human_version(runner: GitRunner, commit: str) -> tuple[str | None, tuple[str, ...]]:
    """The newest commit at or before ``commit`` that changed the file and no run pushed.

    Also the run ids whose later changes to the file are therefore not used.
    ``None``: no such commit among the last ``SEARCH_DEPTH`` that changed it.
    """
    fmt = f"%H%x09%(trailers:key={TRAILER},valueonly,separator=%x2C)"
    found = runner.run("log", f"-n{SEARCH_DEPTH}", f"--format={fmt}", commit, "--", REPO_FILE)
    skipped: list[str] = []
    for line in found.stdout.splitlines() if found.ok else []:
        sha, _, runs = line.partition("\t")
        ids = [run.strip() for run in runs.split(",") if run.strip()]
        if not ids:
            return sha.strip(), tuple(skipped)
        skipped.extend(ids)
    return None, tuple(skipped)


def _read_at(runner: GitRunner, commit: str) -> tuple[bytes | None, str | None]:
    """``.afk.toml`` at ``commit``: ``(its bytes or None, a problem or None)``."""
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
    runner = GitRunner(GitRepo.mirror(mirror))
    version, skipped = human_version(runner, commit)
    raw, problem = _read_at(runner, version) if version is not None else (None, None)
    effective, report = apply_repo_file(repo, raw)
    problems = (problem, *report.problems) if problem is not None else report.problems
    return effective, RepoFileReport(report.applied, report.overridden, problems, skipped)
