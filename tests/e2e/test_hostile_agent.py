"""A hostile agent under ``pipeline run``: every secret, remote and other repo stays out of reach.

The world has a sentinel value for every kind of secret the daemon holds (forge
token, push token, webhook secret, API token, a notification URL's password),
a fake GitHub, a token-protected git server as the only remote, an attacker's
capture server and a loopback port that is not on the agent's allowlist. The
agent (``hostile_agent.py``) reads every process and file it can see, plants
git config, hooks and a credential helper wherever it can, writes outside its
worktree, leaves a detached child behind, connects where it may not, and posts
its loot. Outcomes are read from outside: the remote, the capture servers, the
marker directory, the database, the API, the SSE stream, the run page, the log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from pipeline.store import Run, RunFilter, Store
from pipeline.testing.forges import FakeGitHub
from pipeline.testing.git_http import GitHttpServer
from pipeline.testing.gitrepos import git, make_remote
from pipeline.testing.receiver import Receiver

from .conftest import Cli, free_port, stop_daemon

pytestmark = pytest.mark.slow

SLUG = "acme/app"
SECRETS = {
    "AFK_E2E_FORGE_TOKEN": "sntl-forge-Zq81xk",
    "AFK_E2E_PUSH_TOKEN": "sntl-push-Wm42nv",
    "AFK_E2E_WEBHOOK_SECRET": "sntl-hook-Pt67rb",
    "AFK_E2E_API_TOKEN": "sntl-api-Kd93se",
}
NOTIFY_PASSWORD = "sntl-notify-Hx25cu"
# Held in files of the daemon's places: the config, another repo's checkout, the daemon's HOME.
IN_FILES = {
    "config": "sntl-config-Lc38fa",
    "other": "sntl-other-Rb72dw",
    "home": "sntl-home-Nt16gk",
}
AGENT = Path(__file__).with_name("hostile_agent.py")
LATE_WAIT_S = 25.0  # the agent's detached child would write its marker after 20 s


@dataclass
class World:
    root: Path
    cli: Cli
    database_url: str
    remote: Path
    markers: Path
    other_checkout: Path
    capture: Receiver
    forbidden: Receiver
    notified: Receiver
    forge: FakeGitHub

    def sentinels(self) -> list[str]:
        return [*SECRETS.values(), NOTIFY_PASSWORD, *IN_FILES.values()]


def _config(
    root: Path,
    database_url: str,
    git_server: GitHttpServer,
    forge: FakeGitHub,
    receivers: tuple[Receiver, Receiver, Receiver],
    port: int,
) -> Path:
    capture, forbidden, _ = receivers
    volume = root / "volume"
    hostile_env = {
        "HOSTILE_LOOK": str(root),  # config, database, volume and the daemon's HOME
        "HOSTILE_CAPTURE": capture.url,
        "HOSTILE_FORBIDDEN_PORT": str(forbidden.port),
        "HOSTILE_OTHER": str(volume / "repos" / "gh" / "acme" / "other" / "checkout"),
        "HOSTILE_VOLUME": str(volume),
        "HOSTILE_MARKERS": str(root / "markers"),
    }
    env_table = "".join(f"{key} = {json.dumps(value)}\n" for key, value in hostile_env.items())
    config = root / "etc" / "pipeline.toml"
    config.parent.mkdir()
    config.write_text(f"""# {IN_FILES["config"]}
database_url = {json.dumps(database_url)}
volume = {json.dumps(str(volume))}
poll_interval_s = 0.5
[scheduler]
lease_s = 20
heartbeat_s = 2
sweep_interval_s = 1
claim_interval_s = 0.2
[http]
listen = "127.0.0.1:{port}"
api_token_env = "AFK_E2E_API_TOKEN"
[notify]
urls_env = "AFK_E2E_NOTIFY_URLS"
notify_success = true
[trackers.gh]
kind = "github"
base_url = "{forge.url}"
token_env = "AFK_E2E_FORGE_TOKEN"
webhook_secret_env = "AFK_E2E_WEBHOOK_SECRET"
[agents.hostile]
kind = "command"
command = [{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}, "{{workdir}}"]
idle_timeout_s = 120
[agents.hostile.env]
{env_table}
[repos.app]
tracker = "gh"
slug = "{SLUG}"
remote_url = "{git_server.url("app.git")}"
agent = "hostile"
[repos.app.push]
token_env = "AFK_E2E_PUSH_TOKEN"
""")
    return config


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def world(
    request: pytest.FixtureRequest, tmp_path: Path, host_dir: Path, cli_env: dict[str, str]
) -> Iterator[World]:
    """The world above, on each engine; the daemon is not started yet. The daemon's places
    are on the host's disk (``host_dir``): under /tmp, which every sandbox replaces, the
    agent would find nothing there to read or write whether or not the daemon hides them."""
    if request.param == "sqlite":
        database_url = f"sqlite:///{host_dir / 'db' / 'history.db'}"
        (host_dir / "db").mkdir()
    else:
        database_url = request.getfixturevalue("postgres_url")
    srv = tmp_path / "srv"
    srv.mkdir()
    make_remote(srv, {"README.md": "app\n"}, name="app")
    (host_dir / "markers").mkdir()
    other = host_dir / "volume" / "repos" / "gh" / "acme" / "other" / "checkout"
    other.mkdir(parents=True)
    (other / "README.md").write_text(f"another repository {IN_FILES['other']}\n")
    (host_dir / "home").mkdir()
    (host_dir / "home" / "notes.txt").write_text(IN_FILES["home"])
    forge = FakeGitHub(token=SECRETS["AFK_E2E_FORGE_TOKEN"])
    forge.add_repo(SLUG)
    forge.set_permission(SLUG, "alice", "write")
    number = forge.add_issue(SLUG, "Write the notes file")
    forge.apply_label(SLUG, number, "ready-for-agent", "alice")
    with (
        GitHttpServer(srv, SECRETS["AFK_E2E_PUSH_TOKEN"]) as git_server,
        forge,
        Receiver() as capture,
        Receiver() as forbidden,
        Receiver() as notified,
    ):
        env = {
            **cli_env,
            "HOME": str(host_dir / "home"),  # the daemon's HOME, among what the agent looks at
            **SECRETS,
            "AFK_E2E_NOTIFY_URLS": f"json://afk:{NOTIFY_PASSWORD}@127.0.0.1:{notified.port}/notify",
        }
        port = free_port()
        config = _config(
            host_dir, database_url, git_server, forge, (capture, forbidden, notified), port
        )
        yield World(
            host_dir,
            Cli(config, env),
            database_url,
            srv / "app.git",
            host_dir / "markers",
            other,
            capture,
            forbidden,
            notified,
            forge,
        )


def _finished_run(store: Store, deadline: float, log: Path) -> Run:
    while time.monotonic() < deadline:
        runs = store.list_runs(RunFilter(limit=5))
        if runs and runs[0].terminal:
            return runs[0]
        time.sleep(0.3)
    raise AssertionError(f"no finished run; runs: {runs}\n{log.read_text()[-4000:]}")


def _served(port: int, run_id: int) -> str:
    base = f"http://127.0.0.1:{port}"
    texts = [
        httpx.get(f"{base}/api/runs/{run_id}/log", timeout=30).text,
        httpx.get(f"{base}/api/runs/{run_id}", timeout=30).text,
        httpx.get(f"{base}/runs/{run_id}", timeout=30).text,
    ]
    chunks: list[str] = []
    until = time.monotonic() + 15  # a bounded read of the replayed stream, not a limit
    with httpx.stream("GET", f"{base}/api/events?after=0", timeout=30) as stream:
        for chunk in stream.iter_text():
            chunks.append(chunk)
            if '"state":"succeeded"' in chunk or time.monotonic() > until:
                break
    return "\n".join([*texts, *chunks])


def _database_text(world: World) -> str:
    if world.database_url.startswith("sqlite:///"):
        path = Path(world.database_url[len("sqlite:///") :])
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*")).decode(
            "utf-8", "replace"
        )
    dump = subprocess.run(
        ["pg_dump", "--data-only", world.database_url.replace("postgresql+psycopg", "postgresql")],
        capture_output=True,
        text=True,
        check=True,
    )
    return dump.stdout


def _late_child_alive() -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"afk-hostile-late-child" in (entry / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def test_hostile_agent_gets_nothing_and_pushes_only_to_the_remote(world: World) -> None:
    """Every attack fails, no sentinel appears anywhere, the push lands on the remote only."""
    world.cli("db", "upgrade")
    log = world.root / "daemon.log"
    daemon = world.cli.daemon(log)
    port = int(world.cli.config.read_text().split('listen = "127.0.0.1:')[1].split('"')[0])
    store = Store(world.database_url)
    try:
        run = _finished_run(store, time.monotonic() + 180, log)
        served = _served(port, run.id)
        agent_done = time.monotonic()
        while time.monotonic() - agent_done < LATE_WAIT_S:
            time.sleep(0.5)
    finally:
        stop_daemon(daemon)
        store.close()
    assert run.state == "succeeded", log.read_text()[-4000:]
    head = git(world.remote, "log", "-1", "--format=%H%n%B", "main")
    assert f"Afk-Run: {run.id}" in head
    report = json.loads(git(world.remote, "show", "main:hostile-report.json"))
    attacks = {k: v for k, v in report.items() if not k.startswith(("read_", "late_"))}
    assert attacks and all(outcome.startswith("failed") for outcome in attacks.values()), attacks
    loot = git(world.remote, "show", "main:loot.txt")
    everything = "\n".join(
        [
            loot,
            served,
            log.read_text(errors="replace"),
            _database_text(world),
            *(r.body.decode("utf-8", "replace") for r in world.notified.received),
        ]
    )
    leaked = [s for s in world.sentinels() if s in everything]
    assert leaked == []
    assert world.capture.received == [] and world.forbidden.received == []
    assert sorted(p.name for p in world.markers.iterdir()) == []
    assert not (world.other_checkout / "planted.txt").exists()
    assert not (world.root / "volume" / "planted.txt").exists()
    worktrees = world.root / "volume" / "repos" / "gh" / "acme" / "app" / "worktrees"
    assert list(worktrees.rglob("late-marker.txt")) == [] and not _late_child_alive()
    assert len(world.notified.received) >= 1  # the notification itself was delivered
