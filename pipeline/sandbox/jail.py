"""One run's sandbox: its tree, its HOME, its caches, and how its commands are run.

``Jail.run`` is ``pipeline.core.proc.run_command`` for code from the repository or
the agent: the agent itself, setup commands, the test gate. The layout is
decided once per run from the prepared tree (``tree_layout``); the network
policy per command (the agent's own, or the repo's default for setup and tests).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.core.files import drop_special_files
from pipeline.core.printable import shown_names
from pipeline.core.proc import CommandResult, run_command
from pipeline.git.util import safe_component
from pipeline.sandbox.bwrap import Layout, bwrap_argv
from pipeline.sandbox.environment import sandbox_environment
from pipeline.sandbox.network import Denied, NetworkPolicy, egress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A command ready to start: its argv and the descriptors it must inherit."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()


class Sandbox(Protocol):
    """Turns an argv into one that runs confined to a layout."""

    @property
    def mode(self) -> str:
        """``bwrap`` or ``none``."""
        ...

    @property
    def description(self) -> str:
        """One line for the start-up banner, the log and ``/health``."""
        ...

    def command(
        self, argv: Sequence[str], layout: Layout, on_denied: Denied | None
    ) -> contextlib.AbstractContextManager[Prepared]:
        """The confined command, valid while the block runs; it is torn down after."""
        ...


@dataclass(frozen=True)
class BwrapSandbox:
    """bubblewrap, with what the daemon hides and re-exposes on every run."""

    bwrap: Path
    version: str
    hidden: tuple[Path, ...] = ()
    hidden_files: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    mode: str = "bwrap"

    @property
    def description(self) -> str:
        return f"bwrap ({self.version}, {self.bwrap})"

    @contextlib.contextmanager
    def command(
        self, argv: Sequence[str], layout: Layout, on_denied: Denied | None
    ) -> Iterator[Prepared]:
        layout = dataclasses.replace(
            layout,
            hidden=(*self.hidden, *layout.hidden),
            hidden_files=(*self.hidden_files, *layout.hidden_files),
            read_only=(*self.read_only, *layout.read_only),
            writable=(*layout.writable, *self.writable),
        )
        with contextlib.ExitStack() as stack:
            lifeline = stack.enter_context(_lifeline())
            proxy = None
            if layout.network.mode != "open":
                proxy = stack.enter_context(egress(layout.network, on_denied)).path
            yield Prepared(bwrap_argv(self.bwrap, layout, argv, proxy, lifeline), (lifeline,))


@dataclass(frozen=True)
class Unconfined:
    """``[sandbox] mode = "none"``: commands run as the daemon's user, unconfined."""

    mode: str = "none"
    description: str = "NONE: agents run unconfined as the daemon's user ([sandbox] mode = none)"

    @contextlib.contextmanager
    def command(
        self, argv: Sequence[str], layout: Layout, on_denied: Denied | None
    ) -> Iterator[Prepared]:
        yield Prepared(list(argv))


@dataclass(frozen=True)
class Jail:
    """Everything needed to run one run's commands confined."""

    sandbox: Sandbox
    layout: Layout
    host_env: Mapping[str, str] = field(repr=False, default_factory=dict)
    pass_env: tuple[str, ...] = ()
    cache_env: Mapping[str, str] = field(default_factory=dict)
    home: Path = Path("/nonexistent")

    @property
    def network(self) -> NetworkPolicy:
        """The repo's default policy: setup commands and the test gate use it."""
        return self.layout.network

    def environment(
        self, *, extra_pass: Sequence[str] = (), settings: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The explicit environment: pass-through list, HOME, TMPDIR, caches, ``settings``."""
        return sandbox_environment(
            self.host_env,
            home=self.home,
            extra_pass=(*self.pass_env, *extra_pass),
            settings={**self.cache_env, **_bytecode(self.sandbox.mode), **(settings or {})},
        )

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        network: NetworkPolicy | None = None,
        events: EventSink | None = None,
        **options: Any,
    ) -> CommandResult:
        """``run_command`` inside the sandbox; refused connections reach the timeline."""
        layout = dataclasses.replace(
            self.layout, workdir=cwd, network=network or self.layout.network
        )
        try:
            with self.sandbox.command(argv, layout, _denial_events(events)) as prepared:
                result = run_command(
                    prepared.argv, cwd=cwd, env=env, pass_fds=prepared.pass_fds, **options
                )
        finally:
            drop_special(self.layout.workdir, events)
        if self.sandbox.mode == "none":
            return result
        return signalled_as_negative(result)

    def agent_network(self, mode: str | None, hosts: Sequence[str]) -> NetworkPolicy:
        """The repo's policy, in ``mode`` when given, with ``hosts`` allowed as well."""
        base = self.layout.network
        allowed = tuple(dict.fromkeys((*base.allow_hosts, *hosts)))
        return NetworkPolicy(mode=mode or base.mode, allow_hosts=allowed)

    @classmethod
    def unconfined(
        cls,
        workdir: Path,
        host_env: Mapping[str, str],
        home: Path,
        cache_env: Mapping[str, str] | None = None,
    ) -> Jail:
        """No sandbox, the explicit environment still: for tools and tests off the daemon."""
        return cls(
            Unconfined(),
            Layout(workdir=workdir, network=NetworkPolicy("open")),
            host_env=host_env,
            home=home,
            cache_env=cache_env or {},
        )

    def with_read_only(self, paths: Sequence[Path]) -> Jail:
        """This jail with more host paths shown read-only (an agent's installation)."""
        return dataclasses.replace(
            self,
            layout=dataclasses.replace(self.layout, read_only=(*self.layout.read_only, *paths)),
        )

    def read_only_tree(self, keep: Path) -> Jail:
        """This jail with everything it could write shown read-only, except ``keep`` (a HOME):
        the worktree, its git metadata and the caches (a reviewer reads, never writes)."""
        layout = self.layout
        frozen = tuple(p for p in layout.writable if p != keep)
        return dataclasses.replace(
            self,
            layout=dataclasses.replace(
                layout,
                read_only=(*layout.read_only, *frozen),
                writable=tuple(p for p in layout.writable if p == keep),
            ),
        )


def signalled_as_negative(result: CommandResult) -> CommandResult:
    """A sandboxed command killed by signal N, reported as exit -N like an unconfined one.

    bwrap exits ``128 + N`` when its command dies of signal N (the shell's
    convention); callers tell a crash from an answer by a negative code.
    """
    code = result.returncode
    if code is not None and 128 < code < 160:
        return dataclasses.replace(result, returncode=128 - code)
    return result


def _bytecode(mode: str) -> dict[str, str]:
    """Python bytecode that cannot go stale between the agent's edits and the test gate.

    ``.pyc`` files are checked by source mtime (whole seconds) and size: a
    same-size edit within the second of the last import would run old code. A
    sandbox keeps bytecode in its own fresh /tmp; unconfined, none is written.
    """
    if mode == "none":
        return {"PYTHONDONTWRITEBYTECODE": "1"}
    return {"PYTHONPYCACHEPREFIX": "/tmp/pycache"}


@contextlib.contextmanager
def _lifeline() -> Iterator[int]:
    """A pipe's read end for the sandbox; its write end closes when the block ends.

    The write end stays in this process only (not inheritable), so it also
    closes when the daemon dies, however it dies: the sandbox's first process
    then ends everything inside (``pipeline.sandbox.inner``).
    """
    read_end, write_end = os.pipe()
    try:
        yield read_end
    finally:
        os.close(read_end)
        os.close(write_end)


def drop_special(tree: Path, events: EventSink | None) -> list[str]:
    """Delete the FIFOs, sockets and devices a command left in ``tree``; say which.

    The daemon's git reads the tree unconfined right after: a FIFO ``.gitattributes``
    or ``.gitignore`` would block it, in this run and in every later run of a warm
    slot. The names are the agent's: a few are shown, each cut and made well formed.
    """
    dropped = drop_special_files(tree)
    if dropped:
        message = (
            f"removed {len(dropped)} FIFO(s), socket(s) or device(s) left in the tree "
            f"(git cannot commit them and would block on a FIFO): {shown_names(dropped)}"
        )
        if events is not None:
            events("sandbox", message, {"removed": len(dropped)})
        else:
            log.warning("%s: %s", tree, message)
    return dropped


def _denial_events(events: EventSink | None) -> Denied | None:
    if events is None:
        return None

    def denied(target: str, reason: str) -> None:
        events("network", f"sandbox refused a connection to {target}: {reason}", {"target": target})

    return denied


def tree_layout(tree: Path, *, writable: Sequence[Path], network: NetworkPolicy) -> Layout:
    """The layout for a worktree slot or clone at ``tree`` plus ``writable`` (caches, HOME).

    A worktree's git metadata lives in the persistent checkout's ``.git``: it is
    writable (a commit writes objects and refs; a rebase may rewrite
    ``packed-refs``), except what steers git itself, bound read-only on top:
    ``config``, ``hooks``, ``info``, ``objects/info`` (alternates), the
    worktree's gitfile and its admin directory's ``commondir`` and ``gitdir``,
    and the checkout's ``HEAD`` and ``objects/pack`` (a commit writes loose
    objects; the packs hold the history every later run needs). ``objects`` is
    bound onto itself, so it cannot be renamed away from under those binds.
    Files the agent adds there (a ``commondir`` of the checkout, say) steer
    nothing the daemon runs: its git names the repository explicitly.
    """
    dotgit = tree / ".git"
    extra: tuple[Path, ...] = ()
    common = dotgit
    if not dotgit.is_dir():
        admin = _admin_dir(tree, dotgit)
        common = admin.parent.parent
        extra = (common, admin)
    for name in ("hooks", "info", "objects/info", "objects/pack"):
        (common / name).mkdir(parents=True, exist_ok=True)
    protected = [common / name for name in ("config", "hooks", "info", "objects/info")]
    if extra:  # the checkout's HEAD and packs too: no worktree's git writes them; garbage
        # there broke the checkout for every later run of the repo (ADR 0034)
        protected += [extra[1] / "commondir", extra[1] / "gitdir", dotgit, common / "HEAD"]
        protected.append(common / "objects" / "pack")
        extra = (common, common / "objects", extra[1])
    return Layout(
        workdir=tree,
        writable=(tree, *extra, *writable),
        protected=tuple(protected),
        network=network,
    )


def _admin_dir(tree: Path, dotgit: Path) -> Path:
    """The worktree's admin directory, checked to be where the daemon put it."""
    text = dotgit.read_text(encoding="utf-8").strip() if dotgit.is_file() else ""
    if not text.startswith("gitdir:"):
        raise FatalError("sandbox", f"{tree}: .git is neither a directory nor a gitfile")
    admin = (tree / text.removeprefix("gitdir:").strip()).resolve()
    if admin.parent.name != "worktrees" or admin.parent.parent.name != ".git":
        raise FatalError(
            "sandbox",
            f"{tree}: its .git points at {admin}, not at a worktree "
            "of the repo's checkout; refusing to run anything in it",
        )
    return admin


@dataclass(frozen=True)
class Jailer:
    """Builds each run's jail: the daemon's sandbox, the repo's policy, a private HOME."""

    sandbox: Sandbox
    host_env: Mapping[str, str] = field(repr=False)
    homes_root: Path
    pass_env: tuple[str, ...] = ()
    network_for: Callable[[RepoSettings], NetworkPolicy] = lambda repo: NetworkPolicy()

    def home(self, repo: RepoSettings) -> Path:
        """The repo's private HOME for agents and its commands (kept between runs)."""
        home = self.homes_root / safe_component(repo.name)
        home.mkdir(parents=True, exist_ok=True)
        return home

    def jail(self, repo: RepoSettings, tree: Path, cache_env: Mapping[str, str]) -> Jail:
        home = self.home(repo)
        # One bind for the repo's cache root rather than one per tool: every mount costs the
        # start. Only this repo's caches: the rest of the volume stays hidden (ADR 0037).
        caches = tuple(dict.fromkeys(Path(value).parent for value in cache_env.values()))
        layout = tree_layout(tree, writable=(*caches, home), network=self.network_for(repo))
        return Jail(
            self.sandbox,
            layout,
            host_env=self.host_env,
            pass_env=self.pass_env,
            cache_env=cache_env,
            home=home,
        )
