"""The run's commits in its worktree: staging, trailers, and squashing to one.

Only the implement phase writes commits; publish takes them from here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from pipeline.core.errors import EscalationError, FatalError
from pipeline.core.files import remove_tree
from pipeline.core.proc import StopToken
from pipeline.core.states import TRAILER
from pipeline.git.repo import GitRepo
from pipeline.git.run import DEFAULT_LIMITS, FALLBACK_IDENTITY, GitLimits, GitRunner

# No global config at all: neither the daemon's ``~/.gitconfig`` nor anyone else's. HOME
# too, for a git older than ``GIT_CONFIG_GLOBAL``: git takes a HOME it cannot look into
# (``/dev/null/.gitconfig``) as no file, and nobody can make one there.
NO_GLOBAL_CONFIG = {"GIT_CONFIG_GLOBAL": os.devnull, "HOME": os.devnull}


class Git:
    """Git in one run tree, pinned and hardened (``pipeline.git.run``).

    ``global_config=False`` has git read no global config, only the repository's (the
    daemon's own copy) and the system's: what the agent's git sees besides its own HOME.
    The daemon never points its git at the agent's HOME: that HOME is the agent's to
    write, and a ``~/.gitconfig`` there could include a FIFO (the daemon's git would
    block on it) or any file the daemon, unconfined, can read.
    """

    def __init__(
        self,
        tree: GitRepo,
        *,
        stop: StopToken | None = None,
        limits: GitLimits = DEFAULT_LIMITS,
        global_config: bool = True,
    ) -> None:
        self.tree = tree
        env = {} if global_config else dict(NO_GLOBAL_CONFIG)
        self.runner = GitRunner(tree, stop, limits, env=env)
        self._identity: tuple[str, ...] | None = None

    @property
    def root(self) -> Path:
        return self.tree.where

    def run(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        data = input_text.encode("utf-8") if input_text is not None else None
        result = self.runner.run(*args, input_data=data)
        if check and not result.ok:
            raise FatalError(
                "git",
                f"git {args[0]} failed in {self.root} (exit {result.returncode}): "
                f"{result.stderr[-500:]}",
            )
        return result.stdout

    def head(self) -> str:
        return self.run("rev-parse", "HEAD").strip()

    def commits_since(self, base: str) -> list[str]:
        return self.run("rev-list", "--reverse", f"{base}..HEAD").split()

    def message(self, sha: str) -> str:
        return self.run("log", "-1", "--format=%B", sha).strip()

    def untracked(self) -> set[str]:
        """Untracked, not ignored files (paths relative to the root)."""
        listing = self.run("ls-files", "-z", "--others", "--exclude-standard")
        return {path for path in listing.split("\0") if path}

    def clear_stale_locks(self, branch: str) -> list[Path]:
        """Delete the lock files a killed git of the agent left behind; they are stale once
        its sandbox is gone, and git refuses to touch the index, HEAD or the branch while
        one is there (every later git of the run failed, the run with it)."""
        tree = self.tree
        tree.reclaim()  # through a directory the agent replaced by a link, no lock is ours
        locks = [tree.git_dir / "index.lock", tree.git_dir / "HEAD.lock"]
        locks.append(tree.common_dir / "refs" / "heads" / f"{branch}.lock")
        found = [lock for lock in locks if lock.is_file() or lock.is_symlink()]
        for lock in found:
            lock.unlink(missing_ok=True)
        return found

    def ignored(self) -> set[str]:
        """Untracked paths git ignores (a wholly ignored directory as ``dir/``)."""
        listing = self.run(
            "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"
        )
        return {path for path in listing.split("\0") if path}

    def drop_ignored(self, before: set[str], keep_dirs: Sequence[str]) -> list[str]:
        """Delete the ignored paths that were not there ``before`` (``keep_dirs`` excepted).

        Nothing git ignores is committed, so nothing of it is pushed: a file only the run's
        tree has (a module the agent wrote under an ignored ``lib/``, or hid with its own
        ``.gitignore`` line) would let the tests pass on a commit that cannot.
        """
        dropped = []
        for path in sorted(self.ignored() - before):
            parts = Path(path).parts
            if Path(path).is_absolute() or ".." in parts or in_keep_dirs(path, keep_dirs):
                continue
            remove_tree(self.root / path.rstrip("/"))
            dropped.append(path)
        return dropped

    def stage_changes(self, before: set[str], keep_dirs: Sequence[str]) -> bool:
        """Stage the agent's changes: tracked edits, and files untracked now but not ``before``.

        Files that were already untracked when the agent started (test output
        of an earlier gate run, caches) are never the agent's to commit.
        """
        self.run("add", "-u")
        new = [
            path for path in sorted(self.untracked() - before) if not in_keep_dirs(path, keep_dirs)
        ]
        if new:
            # Literal paths on stdin: a generated tree's tens of thousands of them are more
            # than one argument list takes, and as pathspecs each would be matched against
            # every other one (minutes of git add).
            paths = "".join(f"{path.rstrip('/')}\0" for path in new)
            self.run("update-index", "--add", "-z", "--stdin", input_text=paths)
        return self._has_staged()

    def _has_staged(self) -> bool:
        return not self.runner.run("diff-index", "--quiet", "--cached", "HEAD", "--").ok

    def commit(self, message: str) -> str:
        self.run(*self.identity(), "commit", "--no-verify", "-q", "-F", "-", input_text=message)
        return self.head()

    def identity(self) -> tuple[str, ...]:
        """A fallback identity when config gives none (``GIT_COMMITTER_*`` would still win)."""
        if self._identity is None:
            configured = self.run("config", "user.email", check=False).strip()
            self._identity = () if configured else FALLBACK_IDENTITY
        return self._identity

    def with_trailers(self, message: str, trailers: Sequence[tuple[str, str]]) -> str:
        """``message`` ending with ``trailers`` (each added once)."""
        args = ["interpret-trailers", "--if-exists", "addIfDifferent"]
        for key, value in trailers:
            args += ["--trailer", f"{key}: {value}"]
        return self.run(*args, input_text=message.strip() + "\n")

    def has_trailers(self, message: str, trailers: Sequence[tuple[str, str]]) -> bool:
        parsed = self.run("interpret-trailers", "--parse", input_text=message + "\n")
        lines = {line.strip() for line in parsed.splitlines()}
        return all(f"{key}: {value}" in lines for key, value in trailers)

    def squash(
        self, base: str, subject: str, trailers: Sequence[tuple[str, str]]
    ) -> tuple[str, ...]:
        """Make the run's work one commit on ``base`` carrying ``trailers``."""
        commits = self.commits_since(base)
        messages = [self.message(sha) for sha in commits]
        if len(commits) == 1 and self.has_trailers(messages[0], trailers):
            if inert_message(messages[0], trailers) == messages[0]:
                return (commits[0],)
        self.run("reset", "--soft", base)
        if not self._has_staged():
            raise EscalationError(
                "no_change", "the agent's commits add up to no change against the base"
            )
        message = inert_message(combined_message(subject, messages), trailers)
        return (self.commit(self.with_trailers(message, trailers)),)


def in_keep_dirs(path: str, keep_dirs: Sequence[str]) -> bool:
    """Whether ``path`` (relative to the tree) is in one of ``keep_dirs``: a bare name at
    any depth (``node_modules``), a path with a slash from the root (``vendor/bundle``)."""
    parts = Path(path).parts
    for keep in keep_dirs:
        keep_parts = Path(keep.strip("/")).parts
        if len(keep_parts) == 1 and keep_parts[0] in parts:
            return True
        if len(keep_parts) > 1 and parts[: len(keep_parts)] == keep_parts:
            return True
    return False


# A keyword naming an issue makes the forge close it (or reopen it) when the commit lands on
# the default branch: GitHub's and Gitea's close/fix/resolve forms, GitLab's default pattern
# (which adds -ing forms and implement) and Gitea's reopen; before a local or cross-repo
# reference, an issue URL, or an external tracker's KEY-12.
_CLOSING = re.compile(
    r"\b(?:clos(?:e[sd]?|ing)|fix(?:e[sd]|ing)?|resolv(?:e[sd]?|ing)|implement(?:s|ed|ing)?"
    r"|reopen(?:s|ed|ing)?)\b(?=\s*:?\s*(?:issues?\s+)?"
    r"(?:[#!]\d|[\w.-]+(?:/[\w.-]+)+[#!]\d|https?://|[a-z][a-z0-9_]+-\d))",
    re.IGNORECASE,
)


def defuse_closing(message: str) -> str:
    """``message`` with each closing keyword that names an issue turned into ``Refs``.

    Only the daemon closes an issue, and only its own, once CI and the deploy say so: a
    commit message (the agent's, or a subject made of the issue's title, both text a
    stranger can steer) must not close another issue, or this one early, on push.
    """
    return _CLOSING.sub("Refs", message)


def inert_message(message: str, trailers: Sequence[tuple[str, str]]) -> str:
    """``message`` closing no issue, and passing for no other run than the one ``trailers``
    name: each line git could read as an ``Afk-Run`` trailer naming another value goes
    (with the lines folded into it), wherever it stands.

    A commit carrying ``Afk-Run: 12`` passes for run 12's push: run 12 would take it for
    its own work, published, and never push its own. The message is the agent's, steered
    by the issue's text; only the daemon names runs.
    """
    own = dict(trailers).get(TRAILER)
    kept: list[str] = []
    folded = False
    for line in defuse_closing(message).split("\n"):
        if folded and line[:1] in (" ", "\t") and line.strip():
            continue  # git reads an indented line after a trailer as more of its value
        found = _RUN_TRAILER.match(line)
        folded = found is not None
        if found is None or line == f"{TRAILER}: {own}":
            kept.append(line)
    return "\n".join(kept)


_RUN_TRAILER = re.compile(rf"\s*{re.escape(TRAILER)}\s*:", re.IGNORECASE)


def combined_message(subject: str, messages: Sequence[str]) -> str:
    """One message for several: the agent's own if it wrote exactly one, else a list."""
    own = [message for message in messages if message.splitlines()[0].strip() != subject]
    if len(own) == 1:
        return own[0]
    subjects = [message.splitlines()[0].strip() for message in own]
    body = "\n".join(f"- {line}" for line in dict.fromkeys(subjects))
    return f"{subject}\n\n{body}" if body else subject
