"""Per-repo extras in a prepared tree: ``copy_files`` and ``setup_commands``.

Copied files are listed in the repository's ``info/exclude`` (the common one
for worktrees, which git reads for every worktree) so they can never be
committed. Setup commands are operator-written shell, run with the shared
cache environment; a failure escalates with the output tail, a full disk is
retryable.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import CancelRequested, EscalationError, FatalError, LeaseLost
from pipeline.core.events import EventSink
from pipeline.core.files import links_on_the_way
from pipeline.core.proc import StopToken, shell_argv
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.git.util import DiskFull, is_disk_full, relative_inside
from pipeline.sandbox.jail import Jail

OUTPUT_TAIL_LINES = 40


def copy_files(repo: RepoSettings, tree: GitRepo) -> None:
    """Copy the repo's ``copy_files`` into the tree and exclude them from git.

    The exclude file is found from the daemon's own paths, never by asking git
    in a tree whose ``.git`` the agent may have pointed elsewhere.
    """
    if not repo.copy_files:
        return
    root = tree.where
    exclude = tree.common_dir / "info" / "exclude"
    if exclude.is_symlink():
        exclude.unlink()
    # Only this function writes the file: its lines are rebuilt, so a pattern an older
    # version wrote wrongly (``/env`` for ``.env``) does not linger and hide other files.
    lines: list[str] = []
    tracked = _tracked(tree, [item.target for item in repo.copy_files])
    for item in repo.copy_files:
        _refuse_links(repo, root, item.target)  # first: resolving a loop of links raises
        target = relative_inside(root, item.target, what=f"repos.{repo.name}.copy_files")
        if item.target in tracked:
            raise FatalError(
                "config",
                f"repos.{repo.name}.copy_files: the repository tracks {item.target}, so the "
                "copied file would be committed and pushed with the agent's work; copy it to "
                "a path the repository does not track",
            )
        if not item.source.is_file():
            raise FatalError(
                "config",
                f"repos.{repo.name}.copy_files: source {item.source} is missing or not a file",
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item.source, target)
        # Path() drops a leading "./"; lstrip("./") also ate the dot of ".env", so the
        # exclude named "/env" and an agent's `git add -A` committed the copied secret.
        pattern = "/" + Path(item.target).as_posix()
        if pattern not in lines:
            lines.append(pattern)
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _refuse_links(repo: RepoSettings, root: Path, relative: str) -> None:
    """Refuse a copy whose way into the tree passes a symlink: the copy would land at
    another path (one git does not exclude, a tracked file) or, through a link an agent
    left in a kept dependency dir, overwrite a file it points at."""
    link = links_on_the_way(root, Path(relative))
    if link is not None:
        raise FatalError(
            "config",
            f"repos.{repo.name}.copy_files: {relative} would be written through "
            f"{link.as_posix()}, a symlink in the tree: the copy would land where git does "
            "not keep it out of commits, or on the file the link points at. The run stops "
            "before its agent starts; copy it to a path without symlinks on the way",
        )


def _tracked(tree: GitRepo, targets: list[str]) -> set[str]:
    """Which of ``targets`` the tree's index holds (a tracked file git would stage)."""
    listed = GitRunner(tree).ok("ls-files", "-z", "--full-name", "--", *targets)
    names = {name for name in listed.split("\0") if name}
    return {t for t in targets if Path(t).as_posix() in names}


def run_setup(
    repo: RepoSettings,
    workdir: Path,
    jail: Jail,
    events: EventSink,
    stop: StopToken | None,
) -> float:
    """Run every setup command in ``workdir``, confined; return their total duration in seconds."""
    total = 0.0
    for command in repo.setup_commands:
        raise_if_stopped(stop)
        result = jail.run(
            shell_argv(command), cwd=workdir, env=jail.environment(), events=events, stop=stop
        )
        total += result.duration_s
        events(
            "setup",
            f"setup `{command}` exited {result.returncode} in {result.duration_s:.1f}s",
            {
                "command": command,
                "returncode": result.returncode,
                "duration_s": round(result.duration_s, 3),
            },
        )
        if result.stopped:
            raise_if_stopped(stop)
        if result.ok:
            continue
        if is_disk_full(result.output_tail):
            raise DiskFull(f"setup `{command}` in {workdir}: No space left on device")
        raise setup_failed(repo, command, workdir, result.returncode, result.output_tail)
    return total


def raise_if_stopped(stop: StopToken | None) -> None:
    """Raise LeaseLost or CancelRequested when the run was told to stop."""
    if stop is None or not stop.stopped:
        return
    reason = stop.reason or "stop requested"
    if "lease" in reason:
        raise LeaseLost(f"workspace setup stopped: {reason}")
    raise CancelRequested(f"workspace setup stopped: {reason}")


def setup_failed(
    repo: RepoSettings, command: str, workdir: Path, returncode: int | None, tail: str
) -> EscalationError:
    """The escalation for a setup command that failed, with its last output lines."""
    lines = "\n".join(tail.splitlines()[-OUTPUT_TAIL_LINES:])
    status = "was killed" if returncode is None else f"exited {returncode}"
    return EscalationError(
        "setup_failed",
        f"setup command `{command}` of repo {repo.name} {status} in {workdir}; "
        f"fix the command or the repo. Last output:\n{lines}",
    )
