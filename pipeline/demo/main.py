"""``pipeline demo``: the whole loop on embedded defaults, with no accounts.

It builds a throwaway world (two local bare repos with real projects and
tests, a local deploy target, the local tracker with three ready issues, a
local agent that makes real edits), runs the real daemon until every run is
terminal, and prints what happened. One issue is built to break the deploy,
so the demo shows a fix-forward healing it. History goes to the embedded
database of its own (``<data dir>/demos/<time>.db``, or ``--database-url``), so
what an earlier demo left queued or frozen cannot change this one; the summary
names the command that reviews it. ``--serve`` keeps the daemon and its
dashboard up after the summary until Ctrl-C (or SIGTERM).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pipeline.cli import render
from pipeline.config.load import load_settings
from pipeline.config.settings import (
    SandboxSettings,
    Settings,
    default_data_dir,
    default_database_url,
)
from pipeline.core.logs import configure
from pipeline.core.masking import redact_url
from pipeline.daemon import Daemon
from pipeline.sandbox import SandboxUnavailable
from pipeline.sandbox.bwrap import find_bwrap, probe
from pipeline.store import Run, RunFilter, Store
from pipeline.testing.ports import free_port

if TYPE_CHECKING:
    pass

DEMO_TIMEOUT_S = 150.0
PROGRESS_KINDS = ("queued", "state", "recovery", "publish", "test", "deploy", "ci", "repo")
READY = "ready-for-agent"


@dataclass(frozen=True)
class DemoOutcome:
    runs: list[Run]
    issues_closed: int
    issues_total: int
    frozen: tuple[str, ...]
    wall_s: float
    timed_out: bool

    @property
    def by_state(self) -> dict[str, int]:
        return dict(Counter(r.state for r in self.runs))

    @property
    def by_kind(self) -> dict[str, int]:
        return dict(Counter(r.kind for r in self.runs))

    @property
    def fix_forwards(self) -> int:
        return sum(1 for r in self.runs if r.kind == "fix_forward")

    @property
    def as_designed(self) -> bool:
        """Every issue closed, one fix-forward healed the deploy, nothing frozen."""
        healed = [r for r in self.runs if r.kind == "fix_forward" and r.state == "succeeded"]
        return (
            not self.timed_out
            and self.issues_closed == self.issues_total
            and len(healed) == 1
            and not self.frozen
            and all(r.terminal for r in self.runs)
        )


@dataclass(frozen=True)
class DemoOptions:
    keep: bool = False
    as_json: bool = False
    workdir: Path | None = None
    database_url: str | None = None  # default: a new database of this demo's own
    serve: bool = False  # keep the dashboard up after the summary until Ctrl-C


def demo_database_url() -> str:
    """A fresh SQLite file under the data directory, one per demo."""
    folder = default_data_dir() / "demos"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"sqlite:///{folder / f'{stamp}-{os.getpid()}.db'}"


def serve_until_interrupted(say: TextIO, url: str) -> None:
    """Block until Ctrl-C or SIGTERM, the dashboard at ``url`` still served."""
    done = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    say.write(f"dashboard at {url}/ until Ctrl-C\n")
    say.flush()
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def demo_settings(config: Path, database_url: str | None) -> tuple[Settings, str | None]:
    """The demo's settings, and why it runs unconfined when this host cannot sandbox."""
    settings = load_settings(config)
    settings.volume.mkdir(parents=True, exist_ok=True)
    http = replace(settings.http, listen_port=free_port())
    sandbox, unconfined = demo_sandbox(settings.sandbox)
    settings = replace(
        settings, database_url=database_url or default_database_url(), http=http, sandbox=sandbox
    )
    return settings, unconfined


def demo_sandbox(sandbox: SandboxSettings) -> tuple[SandboxSettings, str | None]:
    """Sandboxed where this host allows it; otherwise unconfined, with the reason."""
    try:
        probe(find_bwrap(sandbox.bwrap_path))
    except SandboxUnavailable as exc:
        return replace(sandbox, mode="none"), str(exc)
    return sandbox, None


class Progress:
    """Prints one line per interesting event of the demo's runs."""

    def __init__(self, store: Store, out: TextIO, started: float, quiet: bool) -> None:
        self.store = store
        self.out = out
        self.started = started
        self.quiet = quiet
        self.last_id = store.last_event_id()
        self.runs: set[int] = set()

    def poll(self) -> None:
        for event in self.store.events_since(self.last_id):
            self.last_id = event.id
            if event.run_id not in self.runs:
                continue
            if event.kind in PROGRESS_KINDS and not self.quiet:
                elapsed = time.monotonic() - self.started
                message = event.message
                if event.kind == "queued":
                    message = self._describe(event.run_id)
                self.out.write(
                    f"[{elapsed:5.1f}s] run {event.run_id:<3} {event.kind:<9}{message[:110]}\n"
                )
                self.out.flush()

    def _describe(self, run_id: int) -> str:
        run = self.store.get_run(run_id)
        if run is None:
            return "queued"
        if run.kind == "fix_forward":
            return f"{run.repo_name}: fix-forward of run {run.parent_id}, first in line"
        return f"{run.repo_name} #{run.issue_number}: {run.issue_title}"


def run_demo(options: DemoOptions, out: TextIO, err: TextIO) -> int:
    from pipeline.demo.setup import build_world

    configure("error")
    root = options.workdir or Path(tempfile.mkdtemp(prefix="afk-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say = err if options.as_json else out
    say.write(f"afk-pipeline demo: building a world in {root}\n")
    world = build_world(root)
    try:
        database_url = options.database_url or demo_database_url()
        settings, unconfined = demo_settings(world.config_path, database_url)
        daemon = Daemon(settings)
        say.write(f"sandbox: {daemon.sandbox.description}\n")
        if unconfined is not None:
            say.write(f"  (this host cannot sandbox: {unconfined})\n")
        issue_ids = _file_issues(daemon.store, world.issues, world)
        say.write(
            f"filed {len(issue_ids)} ready issues on the local tracker; "
            f"history in {redact_url(settings.database_url)}\n"
        )
        progress = Progress(daemon.store, say, started, quiet=False)
        first_run = max((r.id for r in daemon.store.list_runs(RunFilter(limit=1))), default=0)
        daemon.start()
        say.write("daemon started\n")
        outcome = _wait(daemon, issue_ids, progress, started, first_run)
        url = daemon.dashboard_url if options.serve else None
        _report(outcome, settings, out, options.as_json, url, world.api_token_path)
        if url is not None:
            serve_until_interrupted(say, url)
    finally:
        if daemon is not None:
            daemon.stop(grace_s=5)
        world.close()
    if not options.keep and options.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if outcome.as_designed else 1


def _file_issues(store: Store, issues: list[dict[str, str]], world: object) -> list[int]:
    names = {r.slug: r.name for r in world.repos}  # type: ignore[attr-defined]
    for name in names.values():  # an interrupted earlier demo may have left issues open
        for stale in store.list_local_issues(repo=name):
            store.close_local_issue(stale.id)
    return [
        store.add_local_issue(
            names[i["repo"]], i["title"], i["body"], author="demo", labels=(READY,)
        ).id
        for i in issues
    ]


def _demo_runs(store: Store, issue_ids: list[int], since_run: int) -> list[Run]:
    runs = store.list_runs(RunFilter(limit=200))
    return sorted((r for r in runs if r.id > since_run), key=lambda r: r.id)


def _wait(
    daemon: Daemon, issue_ids: list[int], progress: Progress, started: float, first_run: int
) -> DemoOutcome:
    store = daemon.store
    deadline = started + DEMO_TIMEOUT_S
    timed_out = True
    runs: list[Run] = []
    while time.monotonic() < deadline:
        runs = _demo_runs(store, issue_ids, first_run)
        progress.runs = {r.id for r in runs}
        progress.poll()
        closed = sum(
            1 for i in issue_ids if (li := store.get_local_issue(i)) and li.state == "closed"
        )
        settled = runs and all(r.terminal for r in runs)
        frozen = store.stats().frozen_repos
        if settled and (closed == len(issue_ids) or frozen):
            timed_out = False
            break
        time.sleep(0.3)
    progress.poll()
    closed = sum(1 for i in issue_ids if (li := store.get_local_issue(i)) and li.state == "closed")
    return DemoOutcome(
        runs=_demo_runs(store, issue_ids, first_run),
        issues_closed=closed,
        issues_total=len(issue_ids),
        frozen=store.stats().frozen_repos,
        wall_s=time.monotonic() - started,
        timed_out=timed_out,
    )


def _report(
    outcome: DemoOutcome,
    settings: Settings,
    out: TextIO,
    as_json: bool,
    url: str | None,
    token_file: Path,
) -> None:
    where = f" --database-url {redact_url(settings.database_url)}"
    if settings.database_url == default_database_url():
        where = ""
    history = f"pipeline runs list{where}"
    summary = {
        "ok": outcome.as_designed,
        "runs_by_state": outcome.by_state,
        "runs_by_kind": outcome.by_kind,
        "fix_forwards": outcome.fix_forwards,
        "frozen_repos": list(outcome.frozen),
        "issues_closed": outcome.issues_closed,
        "issues_total": outcome.issues_total,
        "wall_s": round(outcome.wall_s, 1),
        "review": history,
        "database_url": redact_url(settings.database_url),
        "dashboard": f"{url}/" if url else None,
        "api_token_file": str(token_file) if url else None,
    }
    if not as_json:
        out.write("\n")
        render.runs_table(list(reversed(outcome.runs)), out)
        verdict = "as designed" if outcome.as_designed else "NOT as designed"
        out.write(
            f"\n{outcome.issues_closed}/{outcome.issues_total} issues resolved, "
            f"{outcome.fix_forwards} fix-forward(s), frozen repos: "
            f"{', '.join(outcome.frozen) or 'none'}; {outcome.wall_s:.1f}s; {verdict}.\n"
            f"Review the history: {history}  (one run: pipeline runs show ID{where})\n"
        )
        if url:
            out.write(f"Dashboard: {url}/ (sign in with the token in {token_file})\n")
    if as_json:
        out.write(json.dumps(summary, sort_keys=True) + "\n")
