"""The daemon against a fake GitHub: a signed webhook queues a run in under a second."""

from __future__ import annotations

import json
import select
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from pipeline.store import Run, RunFilter, Store
from pipeline.testing.forges import FakeGitHub, send_webhook
from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, free_port, stop_daemon

SLUG = "acme/app"
READY = "ready-for-agent"
TOKEN = "SENTINEL-gh-t0ken-91c3"
SECRET = "SENTINEL-hook-s3cret-5e2a"
AGENT = """
import pathlib, sys
wd = pathlib.Path(sys.argv[1])
(wd / "NOTES.md").write_text("done\\n")
print("wrote NOTES.md")
"""


def _config(tmp_path: Path, fake: FakeGitHub, port: int, push_mode: str) -> Path:
    remote = make_remote(tmp_path, {"README.md": "app\n"})
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = tmp_path / "pipeline.toml"
    config.write_text(f"""
database_url = "sqlite:///{tmp_path / "history.db"}"
volume = "{tmp_path / "volume"}"
poll_interval_s = 3600
[scheduler]
claim_interval_s = 0.2
[http]
listen = "127.0.0.1:{port}"
[trackers.gh]
kind = "github"
base_url = "{fake.url}"
token_env = "AFK_E2E_GITHUB_TOKEN"
webhook_secret_env = "AFK_E2E_WEBHOOK_SECRET"
[agents.scripted]
kind = "command"
command = [{json.dumps(sys.executable)}, "{agent}", "{{workdir}}"]
[repos.app]
tracker = "gh"
slug = "{SLUG}"
remote_url = "{remote}"
agent = "scripted"
[repos.app.push]
mode = "{push_mode}"
""")
    (tmp_path / "volume").mkdir()
    return config


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    forge = FakeGitHub(token=TOKEN)
    forge.add_repo(SLUG)
    forge.set_permission(SLUG, "alice", "write")
    with forge:
        yield forge


def _until(predicate: Callable[[], object], timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen in {timeout_s}s\n{log.read_text()[-4000:]}")
        time.sleep(0.01)


def _runs(store: Store) -> list[Run]:
    return store.list_runs(RunFilter(limit=10))


def _start(
    tmp_path: Path, cli_env: dict[str, str], fake: FakeGitHub, push_mode: str
) -> tuple[Cli, int]:
    port = free_port()
    cli_env["AFK_E2E_GITHUB_TOKEN"] = TOKEN
    cli_env["AFK_E2E_WEBHOOK_SECRET"] = SECRET
    cli = Cli(_config(tmp_path, fake, port, push_mode), cli_env)
    cli("db", "upgrade")
    return cli, port


def _label_and_send(fake: FakeGitHub, number: int, port: int) -> httpx.Response:
    fake.apply_label(SLUG, number, READY, "alice")
    payload = fake.labeled_webhook(SLUG, number, READY, "alice")
    return send_webhook(f"http://127.0.0.1:{port}/webhooks/gh", "issues", payload, SECRET)


def test_labelled_webhook_queues_the_run_not_a_poll(
    tmp_path: Path, cli_env: dict[str, str], fake: FakeGitHub
) -> None:
    """With hourly polls, the webhook queues the issue: the start-up poll is the only listing."""
    number = fake.add_issue(SLUG, "Write notes")
    cli, port = _start(tmp_path, cli_env, fake, "default-branch")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    store = Store(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        listed = f"/repos/{SLUG}/issues"
        _until(lambda: listed in fake.paths("GET"), 30, "the start-up poll", log)
        assert _runs(store) == []
        response = _label_and_send(fake, number, port)
        _until(lambda: _runs(store), 30, "the queued run", log)
    finally:
        store.close()
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    assert response.status_code == 202, response.text
    assert fake.paths("GET").count(listed) == 1  # no poll did it
    assert TOKEN not in log.read_text() and SECRET not in log.read_text()


def test_branch_mode_run_opens_a_pull_request(
    tmp_path: Path, cli_env: dict[str, str], fake: FakeGitHub
) -> None:
    """Push mode ``branch``: the run pushes its branch and opens one PR into main on the forge."""
    number = fake.add_issue(SLUG, "Write notes")
    cli, port = _start(tmp_path, cli_env, fake, "branch")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        _until(lambda: f"/repos/{SLUG}/issues" in fake.paths("GET"), 30, "the start-up poll", log)
        _label_and_send(fake, number, port)
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "succeeded", 60, daemon, log)
    finally:
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    [pull] = fake.pulls(SLUG)
    assert pull.base == "main" and pull.head.startswith("afk/")
    assert f"Closes #{number}" in pull.body and f"run {runs[0]['id']}" in pull.body
    remote = tmp_path / "remote.git"
    assert git(remote, "rev-parse", f"refs/heads/{pull.head}").strip() == runs[0]["pushed_sha"]


HUGE = 100 * 1024 * 1024
PIECE = b"x" * 65536


def _post_until_answered(port: int, head: bytes, frames: Iterator[bytes]) -> str:
    """Send ``head`` then ``frames`` until the daemon answers; its status line.

    The daemon may answer (and stop reading) before the body is complete, so
    the socket is checked for an answer before each frame, as curl does.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        for frame in frames:
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError):
                break
        return sock.recv(4096).decode("latin-1").split("\r\n", 1)[0]


def _peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    [line] = [x for x in status.splitlines() if x.startswith("VmHWM:")]
    return int(line.split()[1]) / 1024


def test_oversized_webhooks_are_413_with_bounded_memory(
    tmp_path: Path, cli_env: dict[str, str], fake: FakeGitHub
) -> None:
    """100 MB bodies, declared or chunked, get 413; the daemon stays under 150 MB; then work."""
    number = fake.add_issue(SLUG, "Write notes")
    cli, port = _start(tmp_path, cli_env, fake, "default-branch")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    request = b"POST /webhooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    store = Store(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        _until(lambda: f"/repos/{SLUG}/issues" in fake.paths("GET"), 30, "the start-up poll", log)
        declared = _post_until_answered(
            port,
            request + f"Content-Length: {HUGE}\r\n\r\n".encode(),
            (PIECE for _ in range(HUGE // len(PIECE))),
        )
        chunked = _post_until_answered(
            port,
            request + b"Transfer-Encoding: chunked\r\n\r\n",
            (b"%x\r\n%s\r\n" % (len(PIECE), PIECE) for _ in range(HUGE // len(PIECE))),
        )
        peak_mb = _peak_rss_mb(daemon.pid)
        response = _label_and_send(fake, number, port)
        _until(lambda: _runs(store), 30, "the queued run", log)
    finally:
        store.close()
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    assert declared.startswith("HTTP/1.1 413 "), declared
    assert chunked.startswith("HTTP/1.1 413 "), chunked
    assert peak_mb < 150, f"daemon peak RSS {peak_mb:.0f} MB"
    assert response.status_code == 202, response.text
