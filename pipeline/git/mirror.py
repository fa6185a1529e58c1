"""The daemon's bare mirror of each repo: the only place git talks to the remote (ADR 0010).

Layout, beside the persistent checkout::

    <volume>/repos/<forge>/<owner>/<name>/mirror.git          daemon-owned bare mirror
    <volume>/repos/<forge>/<owner>/<name>/checkout.gitconfig  the daemon's copy of the
                                                               checkout's config

Nothing the agent runs can reach the mirror, so it is where credentials are
used: cloned and fetched from the remote, and pushed from, with hooks off and
the daemon's own config. The persistent checkout (whose objects, refs and logs
the agent's sandbox exposes) is fed from the mirror over a local path, with no
secret anywhere. A run's commit travels the other way: the mirror fetches that
exact SHA from the checkout into a private ref (objects checked), verifies that
every commit it adds carries the run's ``Afk-Run`` trailer, and only then pushes
the SHA.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import EscalationError, FatalError, RetryableError
from pipeline.core.files import remove_tree
from pipeline.core.printable import shown
from pipeline.core.proc import StopToken
from pipeline.core.states import TRAILER
from pipeline.git.repo import GitRepo
from pipeline.git.run import DEFAULT_LIMITS, HARDENING, UNTRUSTED, GitLimits, GitResult, GitRunner
from pipeline.git.util import public_url

MIRROR = "mirror.git"
CHECKOUT = "checkout"
CHECKOUT_CONFIG = "checkout.gitconfig"
ALL_BRANCHES = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
TO_CHECKOUT = ("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
RUN_REFS = "refs/afk/runs"
# mirror path -> object format; a repository's hash never changes after its clone
_OBJECT_FORMATS: dict[Path, str] = {}
SEARCH_DEPTH = 200
_HEX = re.compile(r"[0-9a-f]{7,64}")
AUTH_FAILURE = re.compile(
    r"Authentication failed|Permission denied \(publickey|could not read (Username|Password)|"
    r"The requested URL returned error: 40[13]|Host key verification failed"
)
# upload-pack serving the mirror from an agent-writable repository: the local
# transport drops our -c flags for it, so they are given again, with bitmaps off.
UPLOAD_PACK = shlex.join(
    [
        "git",
        *(
            arg
            for key, value in (
                *HARDENING,
                *UNTRUSTED,
                ("pack.useBitmaps", "false"),
                ("uploadpack.allowAnySHA1InWant", "true"),
            )
            for arg in ("-c", f"{key}={value}")
        ),
        "upload-pack",
    ]
)


class Mirror:
    """The bare mirror of one repo and the checkout fed from it."""

    def __init__(self, path: Path, repo: RepoSettings, limits: GitLimits = DEFAULT_LIMITS) -> None:
        self.path, self.repo, self.limits = path, repo, limits
        self.git = GitRepo.mirror(path)

    def runner(self, stop: StopToken | None = None) -> GitRunner:
        return GitRunner(self.git, stop, self.limits)

    def exists(self) -> bool:
        return (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()

    # -- the remote ---------------------------------------------------------------------

    def create(self, stop: StopToken | None) -> None:
        """Clone the remote into a fresh mirror (built aside, then renamed into place)."""
        staging = self.path.with_name(f"{MIRROR}.tmp-{os.getpid()}")
        if staging.exists():
            remove_tree(staging)
        outside = GitRunner(None, stop, self.limits, cwd=self.path.parent)
        try:
            self._checked(outside, "clone", "--bare", "--quiet", self.repo.remote_url, str(staging))
            GitRunner(GitRepo.mirror(staging), stop, self.limits).ok(
                "config", "--remove-section", "remote.origin"
            )
        except BaseException:
            remove_tree(staging)  # a clone cut short (full disk, hang, stop) leaves nothing
            raise
        if self.path.exists():
            remove_tree(self.path)
        staging.rename(self.path)
        _OBJECT_FORMATS.pop(self.path, None)  # a new clone may hash differently

    def fetch(self, stop: StopToken | None, *refspecs: str, prune: bool = True) -> None:
        """Fetch ``refspecs`` (every branch and tag by default) from the remote."""
        args = ["fetch", "--quiet", "--no-tags", *(["--prune"] if prune else [])]
        self._checked(self.runner(stop), *args, self.repo.remote_url, *(refspecs or ALL_BRANCHES))

    def ls_remote(self, ref: str, stop: StopToken | None) -> str:
        """The remote's SHA of ``ref``; "" when it has none."""
        result = self._checked(self.runner(stop), "ls-remote", self.repo.remote_url, ref)
        return result.stdout.split("\t", 1)[0].strip() if result.stdout.strip() else ""

    def push(self, stop: StopToken | None, *args: str) -> GitResult:
        """``git push --porcelain args`` to the remote; the caller reads the outcome."""
        return self.network(stop, "push", "--porcelain", self.repo.remote_url, *args)

    def network(self, stop: StopToken | None, *args: str) -> GitResult:
        """A network command in the mirror; a refusal of the credentials is fatal."""
        return self._network(self.runner(stop), *args)

    def _network(self, runner: GitRunner, *args: str) -> GitResult:
        result = runner.network(*args, url=self.repo.remote_url, credentials=self.repo.push)
        if not result.ok and AUTH_FAILURE.search(f"{result.stdout}\n{result.stderr}"):
            raise FatalError(
                "push_auth",
                f"repo {self.repo.name}: {result.operation}: the "
                "remote refused git's credentials; check push.token / "
                f"push.ssh_key_file: {result.tail()}",
            )
        return result

    def _checked(self, runner: GitRunner, *args: str) -> GitResult:
        result = self._network(runner, *args)
        if not result.ok:
            raise RetryableError(
                "git_fetch", f"repo {self.repo.name}: {result.operation} failed: {result.tail()}"
            )
        return result

    # -- reading ------------------------------------------------------------------------

    def sha(self, ref: str) -> str | None:
        """The commit ``ref`` names in the mirror, if any."""
        result = self.runner().run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        sha = result.stdout.strip()
        return sha if result.ok and sha else None

    def find_pushed(self, ref: str, run_id: int, since: str | None = None) -> str | None:
        return find_pushed(self.path, ref, run_id, since)

    def holds(self, version: str, sha: str, stop: StopToken | None = None) -> bool:
        """Whether commit ``version`` (a SHA, maybe abbreviated) has ``sha`` in its history.

        A version the mirror does not know yet is looked for on the remote (one fetch).
        """
        if not _HEX.fullmatch(version):
            return False
        if self.sha(version) is None:
            self.fetch(stop)
        found = self.sha(version)
        return (
            found is not None
            and self.runner(stop).run("merge-base", "--is-ancestor", sha, found).ok
        )

    def later_head(self, sha: str, stop: StopToken | None = None) -> str | None:
        """The remote default branch's head when it is a later commit holding ``sha``."""
        branch = f"refs/heads/{self.repo.default_branch}"
        self.fetch(stop, f"+{branch}:{branch}", prune=False)
        head = self.sha(branch)
        if head is None or head == sha:
            return None
        return head if self.runner(stop).run("merge-base", "--is-ancestor", sha, head).ok else None

    # -- the checkout -------------------------------------------------------------------

    def checkout(self) -> GitRepo:
        return checkout_repo(self.path.parent)

    def prepare_checkout(self, stop: StopToken | None) -> GitRepo:
        """The checkout, created when missing, with ``origin/*`` and tags as in the mirror."""
        repo_dir = self.path.parent
        config = repo_dir / CHECKOUT_CONFIG
        _write_config(config, self._checkout_config())
        checkout = checkout_repo(repo_dir)
        if checkout.common_dir.is_dir():
            drop_checkout_index(checkout)
            self.feed(checkout, stop)
            return checkout
        staging = self.fresh_checkout(stop)
        if (repo_dir / CHECKOUT).exists():
            remove_tree(repo_dir / CHECKOUT)
        staging.where.rename(repo_dir / CHECKOUT)
        return checkout

    def fresh_checkout(self, stop: StopToken | None) -> GitRepo:
        """A new checkout fed from the mirror in ``checkout.tmp-<pid>``, to rename into place."""
        repo_dir = self.path.parent
        staging = repo_dir / f"{CHECKOUT}.tmp-{os.getpid()}"
        if staging.exists():
            remove_tree(staging)
        GitRunner(None, stop, self.limits, cwd=repo_dir).ok(
            "init",
            "--quiet",
            "--template=",
            f"--object-format={self._object_format()}",
            str(staging),
        )
        fresh = GitRepo.plain(staging, config_source=repo_dir / CHECKOUT_CONFIG)
        self.feed(fresh, stop)
        GitRunner(fresh, stop, self.limits).ok(
            "symbolic-ref", "HEAD", f"refs/heads/{self.repo.default_branch}"
        )
        return fresh

    def feed(self, tree: GitRepo, stop: StopToken | None, *refspecs: str) -> None:
        """Fetch from the mirror into ``tree`` over a local path, with no credentials."""
        prune = [] if refspecs else ["--prune"]
        GitRunner(tree, stop, self.limits).ok(
            "fetch", "--quiet", "--no-tags", *prune, str(self.path), *(refspecs or TO_CHECKOUT)
        )

    def adopt(
        self, tree: GitRepo, sha: str, run_id: int, base: str, stop: StopToken | None
    ) -> None:
        """Fetch commit ``sha`` of run ``run_id`` from ``tree`` into ``refs/afk/runs/<id>``.

        Refuses unless the mirror then holds exactly ``sha`` and every commit in
        ``base..sha`` carries the run's trailer: nothing else is ever pushed.
        """
        tree.reclaim()  # the local transport serves tree's objects under tree's config
        ref = f"{RUN_REFS}/{int(run_id)}"
        runner = self.runner(stop)
        runner.ok(
            "-c",
            "fetch.fsckObjects=true",
            "fetch",
            "--quiet",
            "--no-tags",
            f"--upload-pack={UPLOAD_PACK}",
            str(tree.common_dir),
            f"+{sha}:{ref}",
        )
        if self.sha(ref) != sha:
            raise FatalError(
                "publish_mismatch",
                f"run {run_id}: the mirror fetched {self.sha(ref)} from {tree.where}, not {sha}",
            )
        self._check_trailers(runner, base, sha, run_id)
        self._check_sizes(runner, base, sha, run_id)
        self._check_copied(runner, base, sha, run_id)

    def _check_copied(self, runner: GitRunner, base: str, sha: str, run_id: int) -> None:
        """Refuse when the run's commits touch a ``copy_files`` target (often a secret the
        operator copies in): an agent's ``git add -f`` must not publish it."""
        targets = [Path(item.target).as_posix() for item in self.repo.copy_files]
        if not targets:
            return
        touched = runner.ok("diff", "--name-only", "--no-renames", base, sha, "--", *targets)
        if touched.strip():
            raise EscalationError(
                "copied_file_committed",
                f"run {run_id}'s commits add or change {shown(touched.split()[0])[:200]}, "
                f"a file repos.{self.repo.name}.copy_files copies into the tree: nothing was "
                "pushed, so the copied content did not leave. Drop that change from the "
                "run's commits, then retry the run.",
            )

    def _check_sizes(self, runner: GitRunner, base: str, sha: str, run_id: int) -> None:
        """Refuse when a file the run's commits add is over ``max_file_bytes``."""
        limit = self.repo.max_file_bytes
        added = runner.ok("rev-list", "--objects", f"{base}..{sha}", "--")
        sizes = runner.ok(
            "cat-file",
            "--batch-check=%(objecttype) %(objectsize) %(rest)",
            input_data=added.encode(),
        )
        for line in sizes.splitlines():
            kind, size, path = [*line.split(" ", 2), "", ""][:3]
            if kind == "blob" and int(size) > limit:
                raise EscalationError(
                    "file_too_large",
                    f"run {run_id} committed {shown(path)[:200]} ({_mb(int(size))}), over "
                    f"repos.{self.repo.name}.max_file_bytes ({_mb(limit)}): nothing was "
                    "pushed. Remove the file from the run's commits, or raise the limit "
                    "if the repo keeps files that large, then retry the run.",
                )

    @staticmethod
    def _check_trailers(runner: GitRunner, base: str, sha: str, run_id: int) -> None:
        """Refuse unless ``base..sha`` has commits and each carries ``Afk-Run: run_id``."""
        fmt = f"--format=%H%x09%(trailers:key={TRAILER},valueonly,separator=%x2C)"
        commits = _trailer_lines(runner.ok("log", fmt, f"{base}..{sha}", "--"))
        foreign = [commit for commit, values in commits if str(run_id) not in values]
        if not commits or foreign:
            raise FatalError(
                "missing_trailer",
                f"run {run_id}: refusing to push {sha[:12]}: "
                f"{'commit ' + foreign[0][:12] if foreign else 'no commit'} "
                f"on top of {base[:12]} lacks '{TRAILER}: {run_id}'",
            )

    def adopted(self, run_id: int, sha: str, branch: str) -> None:
        """After a push: the mirror's ``branch`` is ``sha``; the run's private ref goes."""
        runner = self.runner()
        runner.ok("update-ref", f"refs/heads/{branch}", sha)
        runner.ok("update-ref", "-d", f"{RUN_REFS}/{int(run_id)}")

    def _object_format(self) -> str:
        """The mirror's hash (``sha1``/``sha256``), read once per mirror: it never changes."""
        known = _OBJECT_FORMATS.get(self.path)
        if known is None:
            known = self.runner().ok("rev-parse", "--show-object-format").strip() or "sha1"
            _OBJECT_FORMATS[self.path] = known
        return known

    def _checkout_config(self) -> str:
        url = public_url(self.repo.remote_url)
        if "\n" in url:
            raise FatalError("config", f"repos.{self.repo.name}.remote_url holds a newline")
        escaped = url.replace("\\", "\\\\").replace('"', '\\"')
        sha256 = self._object_format() == "sha256"
        extensions = "[extensions]\n\tobjectformat = sha256\n" if sha256 else ""
        return (
            f"[core]\n\trepositoryformatversion = {1 if sha256 else 0}\n\tbare = false\n"
            f'{extensions}[remote "origin"]\n\turl = "{escaped}"\n'
            f"\tfetch = {TO_CHECKOUT[0]}\n"
        )


def checkout_repo(repo_dir: Path) -> GitRepo:
    """The persistent checkout of the repo in ``repo_dir``, pinned, with the daemon's config."""
    config = repo_dir / CHECKOUT_CONFIG
    return GitRepo.plain(repo_dir / CHECKOUT, config_source=config if config.is_file() else None)


def drop_checkout_index(checkout: GitRepo) -> None:
    """Delete an index in the checkout's own git directory: its work tree is never
    checked out, so the agent wrote it, and ``gc`` (housekeeping) failed reading it."""
    remove_tree(checkout.common_dir / "index")


def find_pushed(mirror: Path, ref: str, run_id: int, since: str | None = None) -> str | None:
    """The newest of the last ``SEARCH_DEPTH`` commits on ``ref`` carrying run ``run_id``.

    Searched in the daemon's mirror: a run's push is recent by construction,
    and a missing ref means nothing was pushed. With ``since`` (the SHA the run
    started from), commits reachable from it are left out: they existed before
    the run, so a trailer naming its id there was written by someone else (a
    daemon whose history database was since replaced, an agent copying trailers).
    """
    fmt = f"%H%x09%(trailers:key={TRAILER},valueonly,separator=%x2C)"
    runner = GitRunner(GitRepo.mirror(mirror))
    args = ["log", f"-n{SEARCH_DEPTH}", f"--format={fmt}", ref]
    result = runner.run(*args, *([f"^{since}"] if since else []), "--")
    if not result.ok and since:
        result = runner.run(*args, "--")  # the start is gone from the mirror: search it all
    return pushed_in(result.stdout, run_id) if result.ok else None


def pushed_in(log: str, run_id: int) -> str | None:
    """The first commit of ``log`` whose ``Afk-Run`` trailer names run ``run_id``.

    ``log`` holds ``%H%x09%(trailers:...,separator=%x2C)`` lines, newest first.
    """
    return next((sha for sha, values in _trailer_lines(log) if str(run_id) in values), None)


def _trailer_lines(text: str) -> list[tuple[str, set[str]]]:
    """``(sha, {trailer values})`` from ``%H%x09%(trailers:...,separator=%x2C)`` lines."""
    pairs = []
    for line in text.splitlines():
        sha, _, values = line.partition("\t")
        if sha.strip():
            pairs.append((sha.strip(), {value.strip() for value in values.split(",")}))
    return pairs


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def _write_config(path: Path, text: str) -> None:
    if path.is_file() and not path.is_symlink() and path.read_text(encoding="utf-8") == text:
        return
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)
