"""A persistent checkout whose git directory the agent damaged is rebuilt from the mirror.

The agent's sandbox must be able to write the checkout's objects and refs (git in
a worktree commits there), so it can also append junk to ``packed-refs`` or delete
the object files; then every later git command of the repo fails. Before a run's
worktree is prepared, a cheap probe reads every ref and checks that every object of
the base commit's tree is there; when it (or the preparation itself) fails, the
checkout is rebuilt from the daemon's mirror (ADR 0034), keeping

- every worktree admin dir (``.git/worktrees/*``: frozen evidence, the warm slots),
- the commits of run branches (``afk/*``, unpushed work of runs that failed) and
  of the worktrees' detached HEADs (frozen evidence), fetched from the damaged
  checkout with their objects checked; what cannot be read any more is named.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.core.files import remove_tree
from pipeline.core.printable import well_formed
from pipeline.core.proc import StopToken
from pipeline.git.mirror import CHECKOUT, UPLOAD_PACK, Mirror
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.workspace.slots import reset_slot

log = logging.getLogger(__name__)
RUN_BRANCHES = "refs/heads/afk/"
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_SHOWN = 5


@dataclass
class Rebuilt:
    """What a rebuild carried over from the damaged checkout, and what it could not."""

    why: str
    worktrees: int = 0
    branches: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def message(self) -> str:
        kept = f"kept {len(self.branches)} run branch(es) and {self.worktrees} worktree(s)"
        lost = ""
        if self.lost:
            names = [_cut(well_formed(name), 100) for name in self.lost[:_SHOWN]]
            shown = ", ".join(names) + (" ..." if len(self.lost) > _SHOWN else "")
            lost = f"; could not recover the commits of {shown}"
        return f"rebuilt the repo's checkout from the daemon's mirror: {self.why}; {kept}{lost}"


def damage(checkout: GitRepo, base_sha: str, run: GitRunner) -> str | None:
    """What is wrong with ``checkout``'s git directory, or None when the probe passes.

    Reads every ref (a junk line in ``packed-refs`` fails it) and walks ``base_sha``'s
    tree, looking up every object in it (deleted or truncated object files fail it).
    Neither prints what it reads: no object is decompressed, and no listing of a large
    tree goes through the runner's scrubbing of output.
    """
    if not checkout.common_dir.is_dir():
        return None
    refs = run.run("for-each-ref", "--count=1", "--format=%(refname)")
    if not refs.ok:
        return f"git cannot read its refs: {refs.tail(2)}"
    objects = run.run("rev-list", "--objects", "--quiet", "--no-walk", base_sha, "--")
    if not objects.ok:
        return f"objects of {base_sha[:12]} are missing or unreadable: {objects.tail(2)}"
    return None


def rebuild(mirror: Mirror, why: str, stop: StopToken | None) -> Rebuilt:
    """Replace the repo's checkout by a fresh one fed from the mirror; see the module doc.

    The caller holds the repo's lock. The damaged checkout is renamed aside and
    deleted only once its worktree admin dirs are in the new one.
    """
    repo_dir = mirror.path.parent
    old = mirror.checkout()
    old.reclaim()  # the daemon's config, no links: what follows reads it
    report = Rebuilt(why=why)
    branches, heads = _to_keep(old.common_dir)
    fresh = mirror.fresh_checkout(stop)
    _salvage(GitRunner(fresh, stop, mirror.limits), old, branches, heads, report)
    aside = repo_dir / f"{CHECKOUT}.damaged-{os.getpid()}"
    remove_tree(aside)
    (repo_dir / CHECKOUT).rename(aside)
    fresh.where.rename(repo_dir / CHECKOUT)
    worktrees, kept = aside / ".git" / "worktrees", repo_dir / CHECKOUT / ".git" / "worktrees"
    if worktrees.is_dir() and not worktrees.is_symlink():
        worktrees.rename(kept)
        report.worktrees = len(list(kept.iterdir()))
    remove_tree(aside)
    log.warning("%s: %s", mirror.repo.name, report.message())
    return report


def _to_keep(common: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Run branches (name -> SHA) and detached worktree HEADs (admin dir -> SHA).

    Read as text, not by git, which refuses a damaged ``packed-refs`` whole:
    a junk line costs only itself. Nothing is trusted: a SHA must look like one
    and the fetch that follows checks every object it brings.
    """
    branches: dict[str, str] = {}
    packed = _read(common / "packed-refs")
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if _SHA.fullmatch(sha) and name.startswith(RUN_BRANCHES):
            branches[name] = sha
    loose = common / "refs" / "heads" / "afk"
    for path in sorted(loose.rglob("*")) if loose.is_dir() else []:
        sha = _read(path).strip() if path.is_file() and not path.is_symlink() else ""
        if _SHA.fullmatch(sha):
            branches["refs/" + path.relative_to(common / "refs").as_posix()] = sha
    heads: dict[str, str] = {}
    admins = common / "worktrees"
    for admin in sorted(admins.iterdir()) if admins.is_dir() else []:
        sha = _read(admin / "HEAD").strip()
        if _SHA.fullmatch(sha):
            heads[admin.name] = sha
    return branches, heads


def _salvage(
    fresh: GitRunner,
    old: GitRepo,
    branches: dict[str, str],
    heads: dict[str, str],
    report: Rebuilt,
) -> None:
    """Fetch the kept commits from ``old`` into ``fresh``; recreate the run branches there."""
    wanted = sorted(set(branches.values()) | set(heads.values()))
    if not wanted:
        return
    packed = old.common_dir / "packed-refs"
    hidden = packed.with_name(f"packed-refs.afk-{os.getpid()}")
    if packed.is_file():  # read above; a junk line in it stops upload-pack
        packed.rename(hidden)
    try:
        fetched = _fetch(fresh, old, wanted)
    finally:
        if hidden.is_file():  # the old checkout as it was, should the rebuild stop here
            hidden.rename(packed)
    for name, sha in sorted(branches.items()):
        if sha in fetched and fresh.run("update-ref", name, sha).ok:
            report.branches.append(name.removeprefix("refs/heads/"))
        else:
            report.lost.append(name.removeprefix("refs/heads/"))
    report.lost += [f"worktree {name}" for name, sha in heads.items() if sha not in fetched]


def _fetch(fresh: GitRunner, old: GitRepo, shas: list[str]) -> set[str]:
    """The SHAs of ``shas`` fetched from ``old``.

    One unreadable commit fails a whole fetch, so a failed batch is split in
    halves: a few lost commits among many cost a few fetches each, not one per SHA.
    """
    if _fetched_all(fresh, old, shas):
        return set(shas)
    if len(shas) == 1:
        return set()
    half = len(shas) // 2
    return _fetch(fresh, old, shas[:half]) | _fetch(fresh, old, shas[half:])


def _fetched_all(fresh: GitRunner, old: GitRepo, shas: list[str]) -> bool:
    result = fresh.run(
        "-c",
        "fetch.fsckObjects=true",
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        f"--upload-pack={UPLOAD_PACK}",
        str(old.common_dir),
        *shas,
    )
    return result.ok


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return ""


_CORRUPT = re.compile(
    r"corrupt|inflate|bad object|unable to read|invalid object|packed-refs|"
    r"does not match index|not a git repository|missing (blob|tree|commit)|"
    r"did not send all necessary objects|unable to parse|bad tree|pack .*truncated",
    re.IGNORECASE,
)


def sound_checkout(mirror: Mirror, events: EventSink | None, stop: StopToken | None) -> GitRepo:
    """The checkout fed from the mirror; rebuilt first when feeding it fails or the probe
    finds its git directory damaged."""
    finish_interrupted(mirror.path.parent)
    try:
        checkout = mirror.prepare_checkout(stop)
    except FatalError as exc:
        if exc.kind != "git" or not mirror.checkout().common_dir.is_dir():
            raise
        say_rebuilt(
            rebuild(mirror, f"feeding it from the mirror failed: {_first(exc)}", stop), events
        )
        return mirror.checkout()
    base = mirror.sha(f"refs/heads/{mirror.repo.default_branch}")
    problem = base and damage(checkout, base, GitRunner(checkout, stop, mirror.limits))
    if problem:
        say_rebuilt(rebuild(mirror, problem, stop), events)
    return checkout


def finish_interrupted(repo_dir: Path) -> None:
    """Finish a rebuild the daemon was killed in, between its renames (see ``rebuild``).

    With no checkout in place the damaged one goes back (it is rebuilt again, its
    commits salvaged again); with the fresh one in place, the admin dirs move into it.
    """
    for aside in sorted(repo_dir.glob(f"{CHECKOUT}.damaged-*")):
        checkout = repo_dir / CHECKOUT
        if not checkout.exists():
            aside.rename(checkout)
            continue
        worktrees, kept = aside / ".git" / "worktrees", checkout / ".git" / "worktrees"
        if worktrees.is_dir() and not worktrees.is_symlink() and not kept.exists():
            worktrees.rename(kept)
        remove_tree(aside)


def reset_or_rebuild(
    mirror: Mirror,
    slot: Path,
    target: tuple[str, str],
    in_checkout: GitRunner,
    events: EventSink | None,
) -> GitRepo:
    """``reset_slot``; when it fails on a damaged checkout, rebuild that and reset again."""
    checkout = mirror.checkout()
    try:
        return reset_slot(checkout, slot, mirror.repo, target, in_checkout)
    except FatalError as exc:
        if not corrupt(exc):
            raise
        say_rebuilt(rebuild(mirror, _first(exc), in_checkout.stop), events)
    return reset_slot(checkout, slot, mirror.repo, target, in_checkout)


def corrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a git command failing on a damaged repository."""
    return isinstance(exc, FatalError) and exc.kind == "git" and bool(_CORRUPT.search(str(exc)))


def say_rebuilt(report: Rebuilt, events: EventSink | None) -> None:
    """Put the rebuild on the run's timeline."""
    if events is not None:
        data = {"kept_branches": len(report.branches), "lost": report.lost[:20]}
        events("setup", report.message(), data)


def _first(exc: BaseException) -> str:
    """The end of a git failure's output, without the command line and repeats."""
    text = re.split(r" exited -?\d+: ", str(exc), maxsplit=1)[-1]
    lines = dict.fromkeys(line.strip() for line in text.splitlines() if line.strip())
    return " / ".join(_cut(line, 200) for line in list(lines)[-2:])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
