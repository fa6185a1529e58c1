"""A Gitea or GitLab world for e2e tests: the fake forge, a bare remote, a command agent.

``forge_world`` serves the fake forge of one kind (``gitea``, ``gitlab``) holding
``acme/app`` with ``alice`` as a writer, makes a bare remote, and writes a config
for ``pipeline run``: that forge as the tracker (token and webhook secret by
``*_env``), no CI and no deploy probes, and a command agent that writes
``NOTES.md``, after waiting for a ``release`` file in its area when the issue's
body says ``afk-wait``, or stops ``BLOCKED`` when it says ``afk-block`` (or asks what
follows ``afk-ask:``); notifications go to a loopback receiver. Outcomes are read from
outside: the fake's issues, the remote, the receiver, the store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.store import Run, RunFilter, Store
from pipeline.testing.forges import FakeForge, served
from pipeline.testing.gitrepos import make_remote
from pipeline.testing.receiver import Receiver

from .conftest import Cli, free_port, stop_daemon

SLUG = "acme/app"
MAINTAINER = "alice"
READY = "ready-for-agent"
WORKING = "agent-working"
TOKEN = "SENTINEL-forge-t0ken-7d41"
SECRET = "SENTINEL-hook-s3cret-0b9e"
AGENT = """
import pathlib, sys, time
prompt, wd = pathlib.Path(sys.argv[1]).read_text(), pathlib.Path(sys.argv[2])
release = pathlib.Path(sys.argv[3])
if "afk-wait" in prompt:
    while not release.exists():
        time.sleep(0.05)
if "afk-block" in prompt:
    print("BLOCKED: which port should the service use?")
    sys.exit(0)
asked = [line.split("afk-ask:", 1)[1] for line in prompt.splitlines() if "afk-ask:" in line]
if asked:
    print("BLOCKED: " + asked[0].strip())
    sys.exit(0)
(wd / "NOTES.md").write_text("done\\n")
print("wrote NOTES.md")
"""


@dataclass
class ForgeWorld:
    """One test's fake forge, remote, config and daemon."""

    kind: str
    root: Path
    fake: FakeForge
    cli: Cli
    store: Store
    port: int
    receiver: Receiver  # the humans' notification channel (apprise ``json://``)
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

    @property
    def release(self) -> Path:
        return self.root / "agent-area" / "release"

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhooks/forge"

    def start(self) -> None:
        self.daemons.append(self.cli.daemon(self.log))

    def stop(self) -> int:
        return stop_daemon(self.daemons[-1])

    def issue(self, title: str, body: str = "Please write notes.", *, labelled: bool = True) -> int:
        labels = [READY] if labelled else []
        return self.fake.add_issue(
            SLUG, title, body=body, author=MAINTAINER, labels=labels, labelled_by=MAINTAINER
        )

    def runs(self) -> list[Run]:
        return sorted(self.store.list_runs(RunFilter(limit=100)), key=lambda r: r.id)

    def comments(self, number: int) -> list[str]:
        with self.fake.lock:
            return [c.body for c in self.fake.issue(SLUG, number).comments]

    def wait(self, what: str, predicate: Callable[[], object], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            daemon = self.daemons[-1] if self.daemons else None
            if time.monotonic() > deadline or (daemon is not None and daemon.poll() is not None):
                runs = "\n".join(
                    f"run {r.id} {r.state} {r.error_class} {r.error}" for r in self.runs()
                )
                tail = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
                raise AssertionError(f"{what}: not reached\n{runs}\n{tail}")
            time.sleep(0.1)


@contextmanager
def forge_world(
    root: Path, env: dict[str, str], kind: str, *, poll_interval_s: float = 0.5
) -> Iterator[ForgeWorld]:
    with served(kind, SLUG, token=TOKEN, writer=MAINTAINER) as fake, Receiver() as receiver:
        port = free_port()
        (root / "notify-urls").write_text(f"json://127.0.0.1:{receiver.port}/afk-hook\n")
        config = _config(root, fake, (kind, port), poll_interval_s)
        cli = Cli(config, {**env, "AFK_E2E_FORGE_TOKEN": TOKEN, "AFK_E2E_HOOK_SECRET": SECRET})
        cli("db", "upgrade")
        store = Store(f"sqlite:///{root / 'history.db'}")
        world = ForgeWorld(kind, root, fake, cli, store, port, receiver)
        try:
            yield world
        finally:
            for daemon in world.daemons:
                if daemon.poll() is None:
                    stop_daemon(daemon)
            store.close()


def _config(root: Path, fake: FakeForge, where: tuple[str, int], poll_interval_s: float) -> Path:
    kind, port = where
    remote = make_remote(root, {"README.md": "app\n"})
    agent = root / "agent.py"
    agent.write_text(AGENT)
    (root / "volume").mkdir()
    (root / "agent-area").mkdir()
    release = root / "agent-area" / "release"
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}", str(release)]
    config = root / "pipeline.toml"
    config.write_text(f"""
database_url = "sqlite:///{root / "history.db"}"
volume = "{root / "volume"}"
poll_interval_s = {poll_interval_s}
[scheduler]
claim_interval_s = 0.2
lease_s = 10
heartbeat_s = 1
sweep_interval_s = 0.5
[http]
listen = "127.0.0.1:{port}"
[trackers.forge]
kind = "{kind}"
base_url = "{fake.url}"
token_env = "AFK_E2E_FORGE_TOKEN"
webhook_secret_env = "AFK_E2E_HOOK_SECRET"
[agents.scripted]
kind = "command"
command = {json.dumps(argv)}
[sandbox]
writable_paths = ["{root / "agent-area"}"]
[notify]
urls_file = "{root / "notify-urls"}"
retry_delay_s = 0.2
[repos.app]
tracker = "forge"
slug = "{SLUG}"
remote_url = "{remote}"
agent = "scripted"
""")
    return config
