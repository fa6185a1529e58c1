"""A ship-and-watch world for e2e tests: fake GitHub, deploy targets, a scripted agent, a receiver.

``ShipWorld`` lays out under one temporary directory everything the daemon
needs to take a GitHub issue to a healthy deploy: the fake GitHub (served on
127.0.0.1), one ``DeployTarget`` per repo (its bare remote's hook deploys and
restarts a small app), a command agent (``ship_agent.py``) that makes real
edits chosen by an ``afk-task:`` line in the issue, a ``CiFeeder`` that
reports GitHub check runs on the fake for every commit that lands on a
remote's ``main`` (as Actions would; or pipelines on a fake Woodpecker, with
``Tuning(ci="woodpecker")``), and a loopback ``Receiver`` behind an
apprise ``json://`` URL. The daemon is the real ``python -m pipeline run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.store import Run, Store
from pipeline.testing.configs import write_config
from pipeline.testing.deploy_target import DEMO_APP, DeployTarget
from pipeline.testing.forges import FakeGitHub
from pipeline.testing.gitrepos import commit_to_remote, git
from pipeline.testing.ports import free_port
from pipeline.testing.receiver import Receiver
from pipeline.testing.woodpecker import FakeWoodpecker

from .ci_feeder import Board, CheckPlan, CiFeeder, GitHubChecks, WoodpeckerBoard, default_plan
from .conftest import ENDED, Cli, stop_daemon

TOKEN_ENV = "AFK_E2E_GITHUB_TOKEN"
TOKEN = "sentinel-e2e-forge-token"
MAINTAINER = "alice"
READY = "ready-for-agent"
WORKING = "agent-working"
BLOCKED = "agent-blocked"

APP_LIB = '''"""The service's domain logic."""

GREETING = "hello"


def status():
    return "ok"


def greeting(name):
    return f"{GREETING}, {name}"
'''

APP_TEST = """import unittest

import lib


class GreetingTest(unittest.TestCase):
    def test_greets_by_name(self):
        self.assertTrue(lib.greeting("ada").endswith(", ada"))
"""

APP_FILES = {
    "app.py": DEMO_APP,
    "lib.py": APP_LIB,
    "test_lib.py": APP_TEST,
    ".gitignore": "__pycache__/\n*.pyc\n",
}

AGENT_SCRIPT = Path(__file__).with_name("ship_agent.py")


@dataclass(frozen=True)
class Tuning:
    """Knobs a test turns: the history's database and how long and often a run may try."""

    database_url: str | None = None  # default: SQLite under the world's root
    run_timeout_s: float = 120
    max_attempts: int = 3
    public_url: str | None = None  # [http] public_url: where issue comments link to
    review: bool = False  # the review gate on every repo
    tracker_poll_interval_s: float | None = None  # the fake GitHub's own poll interval
    deploy_probes: tuple[dict[str, Any], ...] | None = None  # default: the target's /health
    ci_timeout_s: float = 60  # how long a commit's CI may stay without a verdict
    ci: str = "github"  # who reports CI: the fake GitHub's check runs, or "woodpecker"


@dataclass(frozen=True)
class RepoSpec:
    """One enrolled repo: its name in the config, its slug on the fake, its deploy target."""

    name: str
    slug: str
    target: DeployTarget

    @property
    def remote(self) -> Path:
        return self.target.remote


class HumanDesk(threading.Thread):
    """A human outside every sandbox: pushes what the agent asks for "meanwhile"."""

    def __init__(self, desk: Path) -> None:
        super().__init__(daemon=True)
        self.desk = desk
        self.desk.mkdir(exist_ok=True)
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(0.05):
            for request in sorted(self.desk.glob("*.json")):
                done = request.with_suffix(".done")
                if not done.exists():
                    job = json.loads(request.read_text())
                    commit_to_remote(job["remote"], job["files"], job["message"])
                    done.write_text("pushed")

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)


@dataclass
class ShipWorld:
    """Everything one test's daemon talks to; ``close()`` tears it all down."""

    root: Path
    fake: FakeGitHub
    receiver: Receiver
    repos: dict[str, RepoSpec]
    cli: Cli
    config: Path
    feeder: CiFeeder
    agent_log: Path
    store: Store
    desk: HumanDesk
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)
    woodpecker: FakeWoodpecker | None = None  # with ``Tuning(ci="woodpecker")``

    # -- building ------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        root: Path,
        env: dict[str, str],
        *,
        repos: tuple[str, ...] = ("web",),
        fix_mode: str = "heal",
        plan: Callable[[str, str, str], CheckPlan] = default_plan,
        max_fix_forwards: int = 2,
        tuning: Tuning | None = None,
    ) -> ShipWorld:
        tuning = tuning or Tuning(database_url=f"sqlite:///{root / 'history.db'}")
        if tuning.database_url is None:
            tuning = replace(tuning, database_url=f"sqlite:///{root / 'history.db'}")
        fake = FakeGitHub(token=TOKEN)
        fake.serve()
        receiver = Receiver()
        specs = {
            name: RepoSpec(
                name, f"acme/{name}", DeployTarget.create(root / f"{name}-target", files=APP_FILES)
            )
            for name in repos
        }
        for spec in specs.values():
            fake.add_repo(spec.slug)
            fake.set_permission(spec.slug, MAINTAINER, "write")
        # The agent's log, its world description and the human's desk (where it asks for a
        # push "by a human meanwhile") are the only host paths its sandbox may write.
        agent_area = root / "agent-area"
        agent_area.mkdir()
        agent_log = agent_area / "agent-log.jsonl"
        agent_log.touch()
        world_file = agent_area / "agent-world.json"
        world_file.write_text(
            json.dumps(
                {
                    "log": str(agent_log),
                    "fix_mode": fix_mode,
                    "remote": str(next(iter(specs.values())).remote),
                }
            )
        )
        notify_urls = root / "notify-urls"
        notify_urls.write_text(f"json://127.0.0.1:{receiver.port}/afk-hook\n")
        (root / "volume").mkdir()
        woodpecker, board = _ci_board(fake, specs, tuning)
        document = _config(
            root, fake.url, specs, (world_file, notify_urls), max_fix_forwards, tuning
        )
        if woodpecker is not None:
            for name, repo_id in woodpecker_ids(specs).items():
                ci = document["repos"][name]["ci"]
                ci.update(kind="woodpecker", base_url=woodpecker.url, repo_id=repo_id)
        config = write_config(root / "pipeline.toml", document)
        env = {**env, TOKEN_ENV: TOKEN}
        cli = Cli(config, env)
        cli("db", "upgrade")
        feeder = CiFeeder(board, {spec.slug: spec.remote for spec in specs.values()}, plan)
        feeder.start()
        desk = HumanDesk(agent_area / "human")
        desk.start()
        store = Store(str(tuning.database_url))
        world = cls(root, fake, receiver, specs, cli, config, feeder, agent_log, store, desk)
        world.woodpecker = woodpecker
        return world

    def close(self) -> None:
        """Stop every process and server; each step runs even if an earlier one failed."""
        with ExitStack() as stack:
            stack.callback(self.receiver.close)
            if self.woodpecker is not None:
                stack.callback(self.woodpecker.close)
            stack.callback(self.fake.stop)
            stack.callback(self.store.close)
            for spec in self.repos.values():
                stack.callback(spec.target.stop)
            stack.callback(self.feeder.stop)
            stack.callback(self.desk.stop)
            for daemon in self.daemons:
                stack.callback(_stop_quietly, daemon)

    # -- acting ----------------------------------------------------------------------

    def label(self, repo: str, title: str, task: str) -> int:
        """A maintainer files an issue with ``afk-task: <task>`` and labels it ready."""
        slug = self.repos[repo].slug
        return self.fake.add_issue(
            slug,
            title,
            body=f"Please do this.\n\nafk-task: {task}\n",
            author=MAINTAINER,
            labels=[READY],
            labelled_by=MAINTAINER,
        )

    def start(self, faults: str | None = None) -> subprocess.Popen[bytes]:
        env = dict(self.cli.env)
        if faults:
            env["PIPELINE_FAULTS"] = faults
        log = self.log_path(len(self.daemons))
        daemon = Cli(self.config, env).daemon(log)
        self.daemons.append(daemon)
        return daemon

    def log_path(self, index: int) -> Path:
        return self.root / f"daemon-{index}.log"

    def human_commit(self, repo: str, files: dict[str, str], message: str) -> str:
        """A human commits ``files`` on top of the remote's main (the hook deploys it)."""
        return commit_to_remote(str(self.repos[repo].remote), files, message)

    @property
    def app_lib(self) -> str:
        return APP_LIB

    @staticmethod
    def git_in(path: Path, *args: str) -> str:
        return git(path, *args)

    # -- observing -------------------------------------------------------------------

    def runs(self) -> list[Run]:
        """Every run, oldest first."""
        return sorted(self.store.list_runs(), key=lambda r: r.id)

    def events(self, run_id: int) -> list[str]:
        return [f"{e.kind}: {e.message}" for e in self.store.run_events(run_id)]

    def wait(
        self, what: str, predicate: Callable[[list[Run]], bool], timeout_s: float = 60.0
    ) -> list[Run]:
        """Poll the history until ``predicate(runs)``; fail with the runs and daemon logs."""
        deadline = time.monotonic() + timeout_s
        while True:
            runs = self.runs()
            if predicate(runs):
                return runs
            dead = [d for d in self.daemons if d.poll() is not None and d.returncode != -9]
            if time.monotonic() > deadline or (dead and dead[-1] is self.daemons[-1]):
                why = "the daemon exited" if dead else f"not reached in {timeout_s:.0f}s"
                raise AssertionError(f"{what}: {why}\n" + self.describe(runs))
            time.sleep(0.25)

    def wait_event(self, run_id: int, prefix: str, timeout_s: float = 20.0) -> str:
        """The first event of ``run_id`` starting with ``prefix`` (``kind: message``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [e for e in self.events(run_id) if e.startswith(prefix)]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id}: no event {prefix!r}: {self.events(run_id)}")
            time.sleep(0.2)

    def describe(self, runs: list[Run]) -> str:
        lines = [
            f"run {r.id} {r.kind} {r.repo_name}#{r.issue_number} {r.state} "
            f"{r.error_class or ''} {(r.error or '')[:300]}"
            for r in runs
        ]
        for run in runs[-4:]:
            lines += [f"  {run.id}| {e}"[:300] for e in self.events(run.id)[-25:]]
        for index in range(len(self.daemons)):
            lines.append(f"--- daemon {index} log tail ---")
            lines.append(self.log_path(index).read_text(errors="replace")[-3000:])
        return "\n".join(lines)

    def agent_calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.agent_log.read_text().splitlines() if line]

    def remote_log(self, repo: str, fmt: str = "%H") -> list[str]:
        """``main`` on the repo's remote, newest first, one formatted entry per commit."""
        out = git(self.repos[repo].remote, "log", f"--format={fmt}%x00", "main")
        return [entry.strip("\n") for entry in out.split("\0") if entry.strip()]

    def commits_of_run(self, repo: str, run_id: int) -> list[str]:
        """SHAs on the remote's main whose ``Afk-Run`` trailer is ``run_id``."""
        fmt = "%H%x09%(trailers:key=Afk-Run,valueonly,separator=%x2C)"
        found = []
        for entry in self.remote_log(repo, fmt):
            sha, _, runs = entry.partition("\t")
            if str(run_id) in [v.strip() for v in runs.split(",")]:
                found.append(sha)
        return found


def _stop_quietly(daemon: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a while (a run may still be busy when a test fails)."""
    try:
        stop_daemon(daemon)
    except subprocess.TimeoutExpired:
        pass  # stop_daemon has killed it by now


@contextmanager
def ship_world(root: Path, env: dict[str, str], **kwargs: Any) -> Iterator[ShipWorld]:
    world = ShipWorld.build(root, env, **kwargs)
    try:
        yield world
    finally:
        world.close()


def woodpecker_ids(specs: dict[str, RepoSpec]) -> dict[str, str]:
    """Each repo's id on the fake Woodpecker, by name: the repos' order, from 1."""
    return {name: str(index) for index, name in enumerate(specs, 1)}


def _ci_board(
    fake: FakeGitHub, specs: dict[str, RepoSpec], tuning: Tuning
) -> tuple[FakeWoodpecker | None, Board]:
    """Who reports the repos' CI: check runs on the fake GitHub, or a fake Woodpecker."""
    if tuning.ci != "woodpecker":
        return None, GitHubChecks(fake)
    woodpecker = FakeWoodpecker()
    ids = {specs[name].slug: repo_id for name, repo_id in woodpecker_ids(specs).items()}
    for repo_id in ids.values():
        woodpecker.add_repo(repo_id)
    return woodpecker, WoodpeckerBoard(woodpecker, ids)


def _config(
    root: Path,
    forge_url: str,
    repos: dict[str, RepoSpec],
    files: tuple[Path, Path],
    max_fix_forwards: int,
    tuning: Tuning,
) -> dict[str, Any]:
    world_file, notify_urls = files
    return {
        "database_url": str(tuning.database_url),
        "volume": str(root / "volume"),
        "poll_interval_s": 0.5,
        "max_concurrency": 3,
        "scheduler": {
            "lease_s": 10,
            "heartbeat_s": 1,
            "sweep_interval_s": 0.5,
            "claim_interval_s": 0.2,
            "backoff_base_s": 0.5,
            "backoff_max_s": 2,
            "max_attempts": tuning.max_attempts,
        },
        "workspace": {"fetch_debounce_s": 0},
        "http": {
            "listen": f"127.0.0.1:{free_port()}",
            **({"public_url": tuning.public_url} if tuning.public_url else {}),
        },
        "trackers": {"gh": _tracker(forge_url, tuning)},
        "agents": {
            "scripted": {
                "kind": "command",
                "command": [sys.executable, str(AGENT_SCRIPT), "{prompt_file}", "{workdir}"],
                "idle_timeout_s": 60,
                "exit_grace_s": 2,
                "env": {"AGENT_WORLD": str(world_file)},
            }
        },
        "sandbox": {"writable_paths": [str(world_file.parent)]},
        "notify": {"urls_file": str(notify_urls), "retries": 2, "retry_delay_s": 0.2},
        "repos": {spec.name: _repo(spec, max_fix_forwards, tuning) for spec in repos.values()},
    }


def _tracker(forge_url: str, tuning: Tuning) -> dict[str, Any]:
    tracker: dict[str, Any] = {"kind": "github", "base_url": forge_url, "token_env": TOKEN_ENV}
    if tuning.tracker_poll_interval_s is not None:
        tracker["poll_interval_s"] = tuning.tracker_poll_interval_s
    return tracker


def _repo(spec: RepoSpec, max_fix_forwards: int, tuning: Tuning) -> dict[str, Any]:
    probe = {
        "kind": "http",
        "url": spec.target.health_url,
        "json_field": "version",
        "timeout_s": 10,
    }
    return {
        "tracker": "gh",
        "slug": spec.slug,
        "remote_url": spec.target.remote_url,
        "test_command": f"{sys.executable} -m unittest -q",
        "test_timeout_s": 60,
        "agent": "scripted",
        "max_fix_iterations": 1,
        "max_fix_forwards": max_fix_forwards,
        "run_timeout_s": tuning.run_timeout_s,
        **({"review": True} if tuning.review else {}),
        "ci": {
            "kind": "github",
            "poll_interval_s": 0.3,
            "appear_timeout_s": 30,
            "timeout_s": tuning.ci_timeout_s,
        },
        "deploy": {
            "initial_delay_s": 0.3,
            "interval_s": 0.3,
            "count": 2,
            "failure_limit": 0,
            "progress_deadline_s": 30,
            "probes": [probe] if tuning.deploy_probes is None else list(tuning.deploy_probes),
        },
    }


def held_ci_plan(slug: str, sha: str, subject: str) -> CheckPlan:
    """A commit whose subject says ``[held-ci]`` stays pending until the test completes
    its check run; every other commit's CI goes green."""
    return CheckPlan(pending_s=600.0 if "[held-ci]" in subject else 0.0)


def silent_ci_plan(slug: str, sha: str, subject: str) -> CheckPlan:
    """A commit whose subject says ``[no-ci]`` gets no CI at all; every other one goes green."""
    return CheckPlan(silent="[no-ci]" in subject)


def issue_runs(runs: list[Run], number: int) -> list[Run]:
    """The issue's own runs (no fix-forwards), oldest first."""
    return [r for r in runs if r.issue_number == number and r.kind == "issue"]


def escalated_after_push(world: ShipWorld) -> tuple[int, Run]:
    """Label a ``[no-ci]`` issue on ``web`` and start the daemon; return the issue and its
    run once the watch escalated it, pushed and without a CI verdict (world: silent_ci_plan)."""
    number = world.label("web", "Add a reports helper [no-ci]", "feature reports")
    world.start()
    runs = world.wait(
        "the watch escalates",
        lambda rs: [r.state for r in issue_runs(rs, number)] == ["escalated"],
        90,
    )
    first = issue_runs(runs, number)[0]
    assert first.error_class == "deploy_inconclusive" and first.pushed_sha, world.describe(runs)
    return number, first


def second_run(world: ShipWorld, number: int, what: str) -> tuple[list[Run], Run]:
    """Every run, and the issue's second run, once that one ended."""
    runs = world.wait(
        what,
        lambda rs: len(issue_runs(rs, number)) == 2 and issue_runs(rs, number)[1].state in ENDED,
        90,
    )
    return runs, issue_runs(runs, number)[1]


def rerun_green(world: ShipWorld, sha: str) -> None:
    """The commit's check runs re-run and green: what GitHub's latest check run now says."""
    with world.fake.lock:
        for run in world.fake.repos[world.repos["web"].slug].check_runs[sha]:
            run.status, run.conclusion = "completed", "success"


def issue_state(runs: list[Run], number: int) -> str | None:
    """The state of the issue's run, None before intake queued it."""
    found = [r for r in runs if r.issue_number == number and r.kind == "issue"]
    return found[0].state if found else None


def watching_held_run(world: ShipWorld) -> tuple[int, Run]:
    """Label a ``[held-ci]`` issue on ``web``, start the daemon, and return the issue's
    number and its run once it pushed and watches the CI the test will complete."""
    number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
    world.start()
    runs = world.wait("the run watches its CI", lambda rs: issue_state(rs, number) == "watching")
    run = next(r for r in runs if r.issue_number == number and r.kind == "issue")
    assert run.pushed_sha, run
    return number, run
